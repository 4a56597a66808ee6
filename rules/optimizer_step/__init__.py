"""Optimizer steps on XLA: the per-step barrier, and the gradient all-reduce.

Two concerns that the rules below keep apart:

- The *step barrier* (`torch_xla.sync()` / `xm.mark_step()`, `xm.optimizer_step(opt, barrier=True)`,
  a device loader (`MpDeviceLoader`, `ParallelLoader(...).per_device_loader(device)`) that syncs at
  every batch, `torch_xla.step()` / `torch_xla.compile`) must run every step, or the lazy graph grows
  across steps. HF accelerate (its prepared data loader is an `MpDeviceLoader`) and Lightning own it
  for the loops they drive.
- The *gradient reduction* across replicas: `xm.optimizer_step` / `xm.reduce_gradients` do it; DDP,
  XLA FSDP / FSDPv2, ZeRO and SPMD do it themselves, and none of them adds the barrier.
"""

# The family's codes start with CODES and its rules' categories are among CATEGORIES; the registry
# (xlalint.rules) checks every rule module of this package against them.
CODES = "XLA4"
CATEGORIES = ("optimizer_step",)
