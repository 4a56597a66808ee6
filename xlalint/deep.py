"""Nesting as deep as Python accepts, never deeper.

Python's parser accepts a file whose tree is about 3,000 levels deep (a 2,900-term `1 + 1 + ... + 1`
is a left-deep chain of 2,900 `BinOp`s; `a.f().f()...` 1,490 calls), while a recursive walk of that
tree (an `ast.NodeVisitor`, `ast.unparse`, libcst's parser and visitors, the analysis's own
recursion over expressions) needs a few Python frames per level, past the default recursion limit
of 1,000. So each file's work runs in a thread of its own with a large stack and a recursion limit
that a tree as deep as Python accepts cannot reach (`deep_stack`), and `python_parse` parses with
the room for recursion a module compiled by `python file.py` has: a file Python refuses as nested
too deep is refused here too, and only such a file.
"""

from __future__ import annotations

import ast
import functools
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import TypeVar

T = TypeVar("T")

# Python's default recursion limit: the room a module compiled by `python file.py` has
PYTHON_RECURSION_LIMIT = 1000
# about 3,000 levels of tree (Python's parser: 3 per frame of its limit) times the frames a walk
# takes per level; each Python frame that goes through C takes well under the stack's share
RECURSION_LIMIT = 400_000
STACK_BYTES = 1 << 30  # reserved address space; only the pages a deep walk touches are used

_lock = threading.Lock()
_running = 0  # deep threads running (the recursion limit is the interpreter's, not a thread's)
_saved_limit = PYTHON_RECURSION_LIMIT
_state = threading.local()


def deep_stack(func: Callable[..., T]) -> Callable[..., T]:
    """`func` run in a thread with a stack and a recursion limit for any tree Python accepts; its
    result returned, its exception raised here. A call already in such a thread runs in place."""

    @functools.wraps(func)
    def run(*args, **kwargs):
        if getattr(_state, "deep", False):
            return func(*args, **kwargs)
        outcome: list = []

        def target() -> None:
            _state.deep = True
            try:
                outcome.append((True, func(*args, **kwargs)))
            except BaseException as exc:  # noqa: BLE001 - raised again in the caller's thread
                outcome.append((False, exc))

        _enter()
        try:
            with _lock:
                previous = threading.stack_size(STACK_BYTES)
                try:
                    thread = threading.Thread(target=target, name="xlalint-deep", daemon=True)
                    thread.start()
                finally:
                    threading.stack_size(previous)
            thread.join()
        finally:
            _leave()
        ok, value = outcome[0]
        if not ok:
            raise value.with_traceback(value.__traceback__)
        return value

    return run


def _enter() -> None:
    global _running, _saved_limit
    with _lock:
        if _running == 0:
            _saved_limit = sys.getrecursionlimit()
            sys.setrecursionlimit(max(_saved_limit, RECURSION_LIMIT))
        _running += 1


def _leave() -> None:
    global _running
    with _lock:
        _running -= 1
        if _running == 0:
            sys.setrecursionlimit(_saved_limit)


def _depth() -> int:
    frame: FrameType | None = sys._getframe()
    depth = 0
    while frame is not None:
        frame, depth = frame.f_back, depth + 1
    return depth


def python_parse(source: str | bytes, filename: str) -> ast.Module:
    """`ast.parse`, accepting the nesting Python accepts in a module it runs, whatever the depth
    of this call and the recursion limit of the moment (Python's parser measures both)."""
    with _lock:
        previous = sys.getrecursionlimit()
        sys.setrecursionlimit(_depth() + PYTHON_RECURSION_LIMIT)
        try:
            return ast.parse(source, filename=filename)
        finally:
            sys.setrecursionlimit(previous)
