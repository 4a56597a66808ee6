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
import contextlib
import functools
import gc
import queue
import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import TypeVar, cast

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
    """`func` run in a thread with a stack and a recursion limit for any tree Python accepts, the
    cycle collector paused meanwhile (see `_collector_paused`); its result returned, its exception
    raised here. A call already in such a thread runs in place."""

    @functools.wraps(func)
    def run(*args, **kwargs):
        if getattr(_state, "deep", False):
            return func(*args, **kwargs)
        with _collector_paused():
            _enter()
            try:
                outcome = _in_deep_thread(functools.partial(func, *args, **kwargs))
            finally:
                _leave()
            if outcome is None:  # no thread can start (a `ulimit -v`, a thread limit): here, within Python's limits
                return func(*args, **kwargs)
        ok, value = outcome
        if not ok:
            error = cast(BaseException, value)
            raise error.with_traceback(error.__traceback__)
        return value

    return run


# A file's work (a `deep_stack` call) holds its trees until it returns, and each collection of the
# youngest generation meanwhile walked what it had built so far: 0.9 of 11 CPU-s of a cold check of
# pytorch/xla, for no garbage (what the work drops has no cycles: `FileContext.close`). Paused for the
# call; what it leaves in cycles is collected after it, as the thresholds say.
@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


# One thread with the large stack per process, which runs each call in turn: a thread per call
# reserved a new stack before the last one's was released (a joined thread's stack is unmapped a
# moment after `join` returns), so a process held two (2 GiB of address space: over a `ulimit -v`
# of 2 GiB, "can't start new thread"), and paid a thread's start per file.
_calls: queue.SimpleQueue | None = None
_thread: threading.Thread | None = None


def _in_deep_thread(call: Callable[[], T]) -> tuple[bool, object] | None:
    """(True, the result) or (False, the exception) of `call` on the deep thread; None when that
    thread cannot start."""
    global _calls, _thread
    with _lock:
        if _thread is None or not _thread.is_alive():  # the first call, or the first in a forked child
            fresh: queue.SimpleQueue = queue.SimpleQueue()
            previous = threading.stack_size(STACK_BYTES)
            try:
                thread = threading.Thread(target=_serve, args=(fresh,), name="xlalint-deep", daemon=True)
                thread.start()
            except RuntimeError:  # "can't start new thread": no room for its stack
                return None
            finally:
                threading.stack_size(previous)
            _thread, _calls = thread, fresh
        calls = _calls
    assert calls is not None  # (set with the thread, above)
    done = threading.Event()
    outcome: list[tuple[bool, object]] = []
    calls.put((call, outcome, done))
    done.wait()
    return outcome[0]


def _serve(calls: queue.SimpleQueue) -> None:
    _state.deep = True
    while True:
        call, outcome, done = calls.get()
        try:
            outcome.append((True, call()))
        except BaseException as exc:  # noqa: BLE001 - raised again in the caller's thread
            outcome.append((False, exc))
        finally:
            done.set()
            del call, outcome, done  # nothing of one call kept alive until the next


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
