"""What the JAX rule tests share: running an example, and counting JAX's compilations."""

import textwrap

import jax


def load(source: str) -> dict:
    """The namespace an example's module leaves after running."""
    namespace: dict = {}
    exec(compile(textwrap.dedent(source), "example", "exec"), namespace)
    return namespace


# every backend compilation JAX makes in this process (a public monitoring event)
COMPILES = {"n": 0}


def _count(event: str, duration: float, **_) -> None:
    if event == "/jax/core/compile/backend_compile_duration":
        COMPILES["n"] += 1


jax.monitoring.register_event_duration_secs_listener(_count)


def compiles(run) -> int:
    """How many programs JAX compiles while `run()` runs: every backend compilation, helper programs
    included, so the count depends on the backend (CUDA compiles some helpers CPU does not; a test
    that asserts an exact count says on which backend it holds)."""
    before = COMPILES["n"]
    run()
    return COMPILES["n"] - before
