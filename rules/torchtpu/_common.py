"""What the TorchTPU rules share: the version they were checked against and how a fix names `torch`."""

from __future__ import annotations

from .._migration.resolve import spell_module  # how a fix names `torch` (the migration engine's)

__all__ = ["CHECKED", "WHEEL", "spell_module"]

CHECKED = "torch-tpu 0.2.0 (torch>=2.11,<=2.15)"
WHEEL = "torch_tpu-0.2.0 wheel"
