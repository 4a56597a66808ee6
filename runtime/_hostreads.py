"""Every read of a device tensor's value by the host, by the user's source line (for the audit).

torch_xla's graph analysis sees a host read only when it forces a graph to run. A read of a value
the last barrier already computed (`loss.item()` after `optimizer_step(barrier=True)`) costs a
device-to-host transfer but runs nothing, so it has no analysis block and no line. The recorder
wraps the tensor methods through which Python reads values and counts each outermost call on a
tensor of a watched device type at the innermost frame of the user's code.
"""

from __future__ import annotations

import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

# method -> how the read shows in the report; `to` counts only when it moves the value to the CPU
READS = {
    "item": "item",
    "tolist": "tolist",
    "numpy": "numpy",
    "cpu": "cpu",
    "to": "to(cpu)",
    "__bool__": "bool",
    "__float__": "float",
    "__int__": "int",
    "__index__": "index",
    "__repr__": "repr",
    "__format__": "format",
}


class HostReadRecorder:
    """A context manager counting host reads of tensors on `device_types` by (file, line, function)
    of the innermost frame under one of `roots` (frames of `skip` folders, such as this package and
    installed libraries, are passed over)."""

    def __init__(
        self, roots: Iterable[Path], device_types: Iterable[str] = ("xla",), skip: Iterable[Path] = ()
    ) -> None:
        self.roots = [Path(r).resolve() for r in roots]
        self.device_types = frozenset(device_types)
        self.skip = [Path(s).resolve() for s in skip] + [Path(__file__).resolve().parent]
        self.counts: Counter[tuple[str, int, str, str]] = Counter()
        self._saved: dict[str, Callable[..., Any]] = {}
        self._depth = threading.local()
        self._files: dict[str, bool] = {}

    def __enter__(self) -> HostReadRecorder:
        import torch

        for name in READS:
            original = getattr(torch.Tensor, name)
            self._saved[name] = original
            setattr(torch.Tensor, name, self._wrap(name, original))
        return self

    def __exit__(self, *exc: object) -> None:
        import torch

        for name, original in self._saved.items():
            setattr(torch.Tensor, name, original)
        self._saved.clear()

    def rows(self) -> list[dict[str, Any]]:
        """The counts as JSON rows, one per line and kind of read."""
        return [
            {"file": f, "line": line, "function": fn, "kind": kind, "count": n}
            for (f, line, fn, kind), n in sorted(self.counts.items())
        ]

    def _wrap(self, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        kind = READS[name]

        def read(tensor: Any, *args: Any, **kwargs: Any) -> Any:
            depth = getattr(self._depth, "n", 0)
            if depth == 0 and self._reads_value(name, tensor, args, kwargs):
                where = self._user_frame(sys._getframe(1))
                if where is not None:
                    self.counts[where + (kind,)] += 1  # (not `[*where, kind]`: mypy reads it as 3.11 syntax)
            self._depth.n = depth + 1  # print(t) reads through item/tolist: count the outermost call only
            try:
                return original(tensor, *args, **kwargs)
            finally:
                self._depth.n = depth

        read.__name__ = read.__qualname__ = name
        read.__doc__ = original.__doc__
        return read

    def _reads_value(self, name: str, tensor: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
        device = getattr(tensor, "device", None)
        if getattr(device, "type", None) not in self.device_types:
            return False
        if name != "to":
            return True
        target = kwargs.get("device", args[0] if args else None)
        return str(getattr(target, "type", target)).split(":")[0] == "cpu"

    def _user_frame(self, frame: Any) -> tuple[str, int, str] | None:
        while frame is not None:
            file = frame.f_code.co_filename
            if self._is_user_file(file):
                return str(Path(file).resolve()), frame.f_lineno, frame.f_code.co_name
            frame = frame.f_back
        return None

    def _is_user_file(self, file: str) -> bool:
        known = self._files.get(file)
        if known is None:
            path = Path(file)
            if not path.is_absolute() or "site-packages" in path.parts or "dist-packages" in path.parts:
                known = False
            else:
                resolved = path.resolve()
                known = not any(s == resolved or s in resolved.parents for s in self.skip) and any(
                    r == resolved or r in resolved.parents for r in self.roots
                )
            self._files[file] = known
        return known
