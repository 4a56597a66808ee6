"""Run one script of a corpus under Dynamo and record what the compiler reports.

Executed as a subprocess by the collector (one per case and mode), never imported by xlalint:

    python capture.py --mode compile --root ROOT --out OUT.json [--stub MOD ...] -- SCRIPT [ARGS ...]

``--mode compile``: every ``torch.compile`` call is forced to ``backend="eager"`` (no Inductor, no C++
compiler: CPU-cheap, and breaks/recompiles are decided by Dynamo, not by the backend), with
``fullgraph=False`` so that a break is logged instead of raised and ``mode=``/``options=`` dropped
(Inductor-only). The ``graph_breaks`` and ``recompiles`` log artifacts are captured (the only place where
every break carries its GB id, see COMPILE_FACTS 2.1) and parsed into records with user source lines.

``--mode trace``: ``torch.compile`` returns its target unchanged and ``sys.settrace`` records the lines
of files under ROOT that run. Dynamo does not execute the bytecode it traces (it evaluates it
symbolically once and runs the graph), so a tracer during the compiled run would miss exactly the
compiled lines; the eager backend computes the same values, so a plain run takes the same paths.
Lines run while a compiled target is on the stack are recorded apart (``compiled_lines``).
"""

from __future__ import annotations

import argparse
import functools
import importlib.machinery
import json
import logging
import os
import re
import runpy
import sys
import time
import traceback
import types

GB_URL = re.compile(r"gb/(gb\d+)\.html", re.I)
AT_USER_CODE = re.compile(r"in user code at (.+):(\d+)\s*$", re.M)
FRAME = re.compile(r'^[\s-]*File "(.+)", line (\d+), in (.+)$', re.M)
RECOMPILING = re.compile(r"Recompiling function (\S+) in (.+):(\d+)")
GUARD = re.compile(r"^\s*- (\d+/\d+): (.*?)\s*$", re.M)
BENIGN_GUARDS = ("training == ", "GLOBAL_STATE changed: grad_mode", "GLOBAL_STATE changed")


class Paths:
    """Maps absolute file names to corpus-relative ones (``None`` outside the corpus)."""

    def __init__(self, root: str, exclude: tuple[str, ...] = ()):
        self.root = os.path.realpath(root)
        self.exclude = {os.path.realpath(p) for p in exclude}

    @functools.lru_cache(maxsize=None)
    def rel(self, path: str) -> str | None:
        if not path or path.startswith("<"):
            return None
        real = os.path.realpath(path)
        if real in self.exclude or not real.startswith(self.root + os.sep):
            return None
        return os.path.relpath(real, self.root).replace(os.sep, "/")

    def show(self, path: str) -> str:
        """Relative inside the corpus, else shortened to the part after site-packages."""
        rel = self.rel(path)
        if rel is not None:
            return rel
        marker = "site-packages" + os.sep
        return "<ext>/" + (path.split(marker, 1)[1] if marker in path else os.path.basename(path))


@functools.lru_cache(maxsize=None)
def _registry() -> dict:
    try:
        import torch

        with open(os.path.join(os.path.dirname(torch.__file__), "_dynamo", "graph_break_registry.json")) as fh:
            return json.load(fh)
    except (ImportError, OSError, ValueError):
        return {}


def registry_type(gb_id):
    """The GB id's type in torch's graph-break registry (the log's first line can be a wrapper message)."""
    variants = _registry().get(gb_id) or [{}]
    return variants[0].get("Gb_type")


def parse_break(msg: str, paths: Paths) -> dict:
    """One ``graph_breaks`` record -> GB id, type, innermost location, user frames, corpus site."""
    gb = GB_URL.search(msg)
    at = AT_USER_CODE.search(msg.splitlines()[0]) if msg else None
    lines = msg.splitlines()
    gb_type = ""
    for i, line in enumerate(lines):
        if line.startswith("Graph Break Reason:"):
            rest = line.split(":", 1)[1].strip()
            following = [ln.strip() for ln in lines[i + 1 :] if ln.strip()]
            # "Encountered graph break when attempting to trace X:" is followed by the GB type line
            gb_type = following[0] if rest.startswith("Encountered graph break") and following else rest
            break
    tb = msg.split("User code traceback:", 1)[1] if "User code traceback:" in msg else ""
    frames = [(f, int(n), fn) for f, n, fn in FRAME.findall(tb)]
    first = next((i for i, (f, _, _) in enumerate(frames) if paths.rel(f) is not None), 0)
    frames = frames[first:]  # drop the harness frames (runpy, capture.py) above the script
    gb_id = gb.group(1).upper() if gb else None
    rec = {
        "gb": gb_id,
        "type": gb_type[:200],
        "gb_type": registry_type(gb_id),
        # Dynamo gave up on the whole frame (it runs eagerly; none of its lines were traced)
        "skip": "falling back to eager" in msg or "Skipping the function" in msg,
        "at": [paths.show(at.group(1)), int(at.group(2))] if at else None,
        "frames": [[paths.show(f), n, fn] for f, n, fn in frames],
        "duplicate": "user stack suppressed" in lines[0] if lines else False,
    }
    in_corpus = [(paths.rel(f), n) for f, n, _ in frames if paths.rel(f) is not None]
    if not in_corpus and at and paths.rel(at.group(1)) is not None:
        in_corpus = [(paths.rel(at.group(1)), int(at.group(2)))]
    # the deepest frame inside the corpus: the statement a static tool can point at
    rec["site"] = list(in_corpus[-1]) if in_corpus else None
    return rec


def restore_stack(rec: dict, artifact: str, paths: Paths) -> dict:
    """A duplicate break's record with frames and site taken from its structured-trace artifact (which
    carries the full user stack). The artifact must be the same break: same GB id and innermost location."""
    user = artifact.split("\nTraceback (most recent call last):", 1)[0]  # drop Dynamo's own exception
    full = parse_break(user, paths)
    if full["gb"] != rec["gb"] or full["at"] != rec["at"] or not full["frames"]:
        return rec
    return {**rec, "frames": full["frames"], "site": full["site"], "restored": True}


def parse_recompile(msg: str, paths: Paths, stack_sites: list) -> dict:
    m = RECOMPILING.search(msg)
    guards = [g for _, g in GUARD.findall(msg) if not g.startswith("User stack trace")]
    guard_sites = [[paths.rel(f), int(n)] for f, n, _ in FRAME.findall(msg) if paths.rel(f) is not None]
    reason = guards[0] if guards else msg.splitlines()[-1] if msg else ""
    reason = reason.split("  #", 1)[0].strip()
    return {
        "function": m.group(1) if m else None,
        "code": [paths.show(m.group(2)), int(m.group(3))] if m else None,
        "reason": reason[:300],
        "benign": any(b in reason for b in BENIGN_GUARDS),
        "guard_sites": guard_sites,
        # corpus frames on the Python stack when Dynamo decided to recompile: the caller of the compiled code
        "callers": stack_sites,
    }


class Capture(logging.Handler):
    """Collects graph-break, recompile and recompile-limit records while the script runs."""

    BREAKS = "torch._dynamo.symbolic_convert.__graph_breaks"
    RECOMPILES = "torch._dynamo.guards.__recompiles"
    ARTIFACT = "dynamo_graph_break_reason"

    def __init__(self, paths: Paths):
        super().__init__(logging.DEBUG)
        self.paths = paths
        self.breaks: list[dict] = []
        self.recompiles: list[dict] = []
        self.limit_hits: list[str] = []
        self._seen: set = set()

    def install(self):
        import torch

        torch._logging.set_logs(graph_breaks=True, recompiles=True)
        for name in (self.BREAKS, self.RECOMPILES):
            lg = logging.getLogger(name)
            lg.handlers[:] = [self]
            lg.propagate = False
        logging.getLogger("torch._dynamo").addHandler(self)
        self._pending: list[str] = []
        real = torch._logging.trace_structured

        def trace_structured(name, metadata_fn=dict, *, payload_fn=lambda: None, **kwargs):
            # Dynamo logs a repeated break (same GB type, same frame chain) with its user stack
            # suppressed, but emits the `dynamo_graph_break_reason` artifact, with the full user stack,
            # for every break, just before the log record (torch 2.13 symbolic_convert.log_graph_break).
            # Only that artifact's payload is computed here (within the except block that formats it).
            if name == "artifact":
                try:
                    meta = metadata_fn()
                    if isinstance(meta, dict) and meta.get("name") == self.ARTIFACT:
                        self._pending.append(str(payload_fn()))
                        del self._pending[:-4]
                except Exception:
                    pass
            return real(name, metadata_fn, payload_fn=payload_fn, **kwargs)

        torch._logging.trace_structured = trace_structured

    def emit(self, record):
        key = (record.name, record.created, record.lineno, record.thread)
        if key in self._seen:  # the same record reaching this handler twice (two loggers)
            return
        self._seen.add(key)
        try:
            msg = record.getMessage()
            if record.name == self.BREAKS:
                rec = parse_break(msg, self.paths)
                artifact = self._pending.pop() if self._pending else None
                self._pending.clear()
                if rec["duplicate"] and artifact:
                    rec = restore_stack(rec, artifact, self.paths)
                self.breaks.append(rec)
            elif record.name == self.RECOMPILES:
                self.recompiles.append(parse_recompile(msg, self.paths, self._stack_sites()))
            elif "recompile_limit" in msg or "cache_size_limit" in msg:
                self.limit_hits.append(msg.splitlines()[0][:300])
        except Exception:  # a parser bug must not kill the measured run
            self.limit_hits.append("capture error: " + traceback.format_exc(limit=1)[-200:])

    def _stack_sites(self):
        out, frame = [], sys._getframe(1)
        while frame is not None:
            rel = self.paths.rel(frame.f_code.co_filename)
            if rel is not None:
                out.append([rel, frame.f_lineno])
            frame = frame.f_back
        return out[:4]


def _target_code(target):
    """The code object Dynamo starts tracing at for a compile target (function, method, module)."""
    import torch

    if isinstance(target, torch.nn.Module):
        return getattr(type(target).forward, "__code__", None)
    fn = getattr(target, "__func__", target)
    owner = getattr(target, "__self__", None)
    if isinstance(owner, torch.nn.Module) and getattr(fn, "__name__", "") in ("_call_impl", "__call__"):
        return getattr(type(owner).forward, "__code__", None)  # Module.compile() compiles _call_impl
    while isinstance(fn, functools.partial):
        fn = fn.func
    return getattr(fn, "__code__", None)


def patch_compile(mode: str, compiled: list, targets: set):
    """Replace torch.compile: eager backend (compile mode) or identity (trace mode)."""
    import torch

    real = torch.compile

    def record(target, kwargs):
        caller = sys._getframe(2)
        code = _target_code(target)
        compiled.append(
            {
                "target": getattr(code, "co_qualname", getattr(code, "co_name", repr(target)[:80])),
                "code": [code.co_filename, code.co_firstlineno] if code else None,
                "called_at": [caller.f_code.co_filename, caller.f_lineno],
                "options": {k: repr(v)[:60] for k, v in kwargs.items()},
            }
        )

    def fake_compile(model=None, **kwargs):
        if model is None:  # @torch.compile(...) decorator form
            return lambda fn: fake_compile(fn, **kwargs)
        record(model, kwargs)
        if mode == "trace":
            return passthrough(model, targets)
        kw = {k: v for k, v in kwargs.items() if k not in ("mode", "options", "backend", "fullgraph")}
        return real(model, backend="eager", fullgraph=False, **kw)

    torch.compile = fake_compile


def passthrough(target, targets: set):
    """What ``torch.compile`` returns in the trace run: the same object shape (an ``OptimizedModule`` for a
    module, so ``_orig_mod.`` state-dict keys and attribute delegation stay as compiled), calling the
    target unchanged through a wrapper whose frame marks "inside a compiled call". Code that reaches the
    module without the wrapper (nanoGPT's ``generate`` calls ``self(...)`` on the original module) is
    then not counted as compiled, as it is not under Dynamo either."""
    import torch
    from torch._dynamo.eval_frame import OptimizedModule

    def wrap(fn):
        @functools.wraps(fn)
        def compiled_call(*args, **kwargs):
            return fn(*args, **kwargs)

        return compiled_call

    targets.add(wrap(len).__code__)  # every wrapper shares this code object
    if isinstance(target, torch.nn.Module):
        ctx = type("PassthroughContext", (), {"__call__": lambda self, fn: wrap(fn)})()
        return OptimizedModule(target, ctx)
    return wrap(target)


class _Dummy:
    """Accepts any call and attribute: what a stubbed module's names become."""

    def __init__(self, *args, **kwargs):
        pass

    def __call__(self, *args, **kwargs):
        return _Dummy()

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Dummy()


def _dummy_attr(attr):
    if attr.startswith("__"):
        raise AttributeError(attr)
    return type(attr, (_Dummy,), {})


def stub_modules(names):
    """Empty stand-ins for third-party modules a corpus imports but the measured path never uses."""
    for name in names:
        mod = types.ModuleType(name)
        mod.__spec__ = importlib.machinery.ModuleSpec(name, None)
        mod.__getattr__ = _dummy_attr  # any public attribute: a dummy class
        sys.modules[name] = mod


def tolerate_missing_custom_ops():
    """torchvision's PyPI wheel is built for CUDA: its C ops cannot load on CPU torch, and its fake-kernel
    registrations then raise on import. Classification models never call those ops; skip them."""
    import torch.library as tl

    real = tl.register_fake

    def register_fake(op, *args, **kwargs):
        reg = real(op, *args, **kwargs)
        if not (isinstance(op, str) and op.startswith("torchvision::")):
            return reg

        def safe(fn):
            try:
                return reg(fn)
            except RuntimeError:
                return fn

        return safe

    tl.register_fake = register_fake


class LineTracer:
    def __init__(self, paths: Paths, targets: set):
        self.paths, self.targets = paths, targets
        self.lines: dict[str, set] = {}
        self.compiled: dict[str, set] = {}

    def _inside(self, frame):
        depth = 0
        while frame is not None and depth < 80:
            if frame.f_code in self.targets:
                return True
            frame, depth = frame.f_back, depth + 1
        return False

    def __call__(self, frame, event, arg):
        rel = self.paths.rel(frame.f_code.co_filename)
        if rel is None:
            return None
        inside = self._inside(frame)
        lines = self.lines.setdefault(rel, set())
        comp = self.compiled.setdefault(rel, set())

        def local(frame, event, arg):
            if event == "line":
                lines.add(frame.f_lineno)
                if inside:
                    comp.add(frame.f_lineno)
            return local

        return local


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=("compile", "trace"), required=True)
    ap.add_argument("--root", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--stub", action="append", default=[])
    ap.add_argument("script")
    ap.add_argument("args", nargs=argparse.REMAINDER)
    ns = ap.parse_args(argv)

    root = os.path.realpath(ns.root)
    script = os.path.join(root, ns.script)
    paths = Paths(root)
    stub_modules(ns.stub)
    import torch

    torch.manual_seed(0)
    tolerate_missing_custom_ops()
    compiled, targets = [], set()
    patch_compile(ns.mode, compiled, targets)
    cap = Capture(paths)
    if ns.mode == "compile":
        cap.install()
    tracer = LineTracer(paths, targets) if ns.mode == "trace" else None

    os.chdir(root)
    sys.path.insert(0, root)
    sys.argv = [script] + list(ns.args)
    error, start = None, time.perf_counter()
    if tracer:
        sys.settrace(tracer)
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as e:
        if e.code not in (None, 0):
            error = f"SystemExit({e.code})"
    except BaseException as e:  # report, don't crash: a partial oracle is still an oracle
        error = "".join(traceback.format_exception_only(type(e), e)).strip()[-600:]
    finally:
        sys.settrace(None)
    seconds = time.perf_counter() - start

    from torch._dynamo.utils import counters

    out = {
        "mode": ns.mode,
        "script": ns.script,
        "args": ns.args,
        "seconds": round(seconds, 2),
        "error": error,
        "compiled": [
            {**c, "code": [paths.show(c["code"][0]), c["code"][1]] if c["code"] else None,
             "called_at": [paths.show(c["called_at"][0]), c["called_at"][1]]}
            for c in compiled
        ],
    }
    if ns.mode == "compile":
        out.update(
            breaks=cap.breaks,
            recompiles=cap.recompiles,
            limit_hits=cap.limit_hits,
            counters={k: dict(counters[k]) for k in ("stats", "frames") if k in counters},
            graph_break_counter=sum(counters["graph_break"].values()),
        )
    else:
        out["executed_lines"] = {f: sorted(v) for f, v in sorted(tracer.lines.items()) if v}
        out["compiled_lines"] = {f: sorted(v) for f, v in sorted(tracer.compiled.items()) if v}
    with open(ns.out, "w") as fh:
        json.dump(out, fh, indent=1, default=str)


if __name__ == "__main__":
    main()
