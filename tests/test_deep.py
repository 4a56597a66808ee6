"""`deep.deep_stack`: calls run on one thread with a large stack, in turn, whatever their number."""

import ast
import threading

import pytest

from xlalint.deep import deep_stack, python_parse


@deep_stack
def _thread_of() -> threading.Thread:
    return threading.current_thread()  # (the object: an OS thread's id may be reused)


@deep_stack
def _depth_of(text: str) -> int:
    depth, node = 0, python_parse(text, "<deep>").body[0].value  # type: ignore[attr-defined]
    while isinstance(node, ast.BinOp):
        node, depth = node.left, depth + 1
    return depth


@deep_stack
def _fails() -> None:
    raise ValueError("from the deep thread")


@deep_stack
def _nested() -> tuple[threading.Thread, threading.Thread]:
    return threading.current_thread(), _thread_of()  # a deep call inside one runs in place


def test_every_call_runs_on_the_same_deep_thread():
    """One stack for the process: a thread per call held two stacks at once for a moment (2 GiB
    of address space), over a `ulimit -v` of 2 GiB."""
    seen = {_thread_of() for _ in range(50)}
    assert len(seen) == 1 and seen != {threading.current_thread()}
    outer, inner = _nested()
    assert outer is inner is next(iter(seen))


def test_trees_as_deep_as_python_accepts_are_walked():
    assert _depth_of("x = " + " + ".join(["1"] * 2_500)) == 2_499


def test_an_exception_comes_back_to_the_caller():
    with pytest.raises(ValueError, match="from the deep thread"):
        _fails()
    assert _thread_of() is _thread_of()  # the thread serves on after a failure


def test_without_room_for_the_thread_calls_run_in_place(monkeypatch):
    """Where no thread can start (a `ulimit -v` too small for its stack, a thread limit), a call runs
    in the caller's thread at Python's own recursion limit: a tree too deep for it is then that
    file's error, not the run's."""
    import sys

    from xlalint import deep

    def refuse(self):
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(deep, "_thread", None)
    monkeypatch.setattr(threading.Thread, "start", refuse)
    limit = sys.getrecursionlimit()
    assert _thread_of() is threading.current_thread()
    assert _depth_of("x = " + " + ".join(["1"] * 50)) == 49
    assert sys.getrecursionlimit() == limit


@deep_stack
def _collector_enabled() -> bool:
    import gc

    return gc.isenabled()


def test_the_collector_pauses_for_a_call_and_resumes_after():
    """A file's trees live for its whole call: collections meanwhile would only walk them again."""
    import gc

    assert gc.isenabled()
    assert _collector_enabled() is False
    assert gc.isenabled()
    with pytest.raises(ValueError):
        _fails()
    assert gc.isenabled()
    gc.disable()  # a caller's own choice is kept
    try:
        _collector_enabled()
        assert not gc.isenabled()
    finally:
        gc.enable()
