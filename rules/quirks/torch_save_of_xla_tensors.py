"""XLA701 torch-save-of-xla-tensors: Flags `torch.save(obj, f)` in torch_xla code when `obj` is, or
evidently contains, tensors on the XLA device."""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from xlalint.analysis.names import dotted_name, keyword_value, method_name, positional, receiver
from xlalint.analysis.placement import MODULE_METHODS, Placement
from xlalint.analysis.vocabulary import XM
from xlalint.diagnostics import Applicability, Fix, ImportRequest
from xlalint.fixing.lazy import cst
from xlalint.rule import Invalid, Rule, Valid

if TYPE_CHECKING:  # libcst loads on first use (xlalint.fixing.lazy)
    from xlalint.fixing.context import CstContext


class TorchSaveOfXlaTensors(Rule):
    """## What it does
    Flags `torch.save(obj, f)` in torch_xla code when `obj` is, or evidently contains, tensors on the
    XLA device: tensors moved there with `.to(device)` or created there (`device=...`), or the
    `state_dict()` of a model (or of an optimizer over the parameters of a model) that lives there.
    The device counts as XLA when it comes from `torch_xla.device()` / `xm.xla_device()` or is an
    `"xla"` device string.

    ## Why is this bad?
    torch_xla's troubleshooting guide ("XLA Tensor Quirks") says XLA tensors should be moved to the CPU
    before saving: saved directly, they are loaded back onto the device(s) they were saved from, so
    loading fails where that device is unavailable (a machine without TPUs, a CPU evaluation job),
    and the caller cannot choose where the loaded tensors go. torch pickles each XLA tensor through
    its own `self.cpu()` copy and rebuilds it with `.to(<saved device>)` at load time
    (`_rebuild_device_tensor_from_cpu_tensor`; recent torch lets a `map_location` given to
    `torch.load` override that device, if the loader knows to pass one). `xm.save` moves everything
    to the CPU first, with one wait and one batched transfer for all the tensors.

    `torch.save` of CPU data (`{k: v.cpu() for k, v in sd.items()}`, plain numbers) is fine and not
    reported.

    ## Example
    ```python
    import torch_xla
    import torch_xla.core.xla_model as xm

    device = torch_xla.device()
    model = Net().to(device)
    train(model)
    torch.save(model.state_dict(), "model.pt")
    ```

    Use instead:
    ```python
    import torch_xla
    import torch_xla.core.xla_model as xm

    device = torch_xla.device()
    model = Net().to(device)
    train(model)
    xm.save(model.state_dict(), "model.pt")  # CPU tensors; only the master ordinal writes
    ```

    ## Fix safety
    The fix calls `xm.save(obj, f, master_only=False)` (importing `torch_xla.core.xla_model as xm`
    when needed), for calls with exactly the two positional arguments whose XLA tensors are state
    dicts or plain tensors (not a module saved whole, whose `nn.Parameter`s `xm.save` would leave on
    the device). `master_only=False` keeps who writes:
    every process that runs the call writes, as with `torch.save`. `xm.save`'s default,
    `master_only=True`, writes only on each host's master ordinal, which silently drops per-replica
    and sharded checkpoints (FSDP shards saved to a path per rank); when only one replica should
    write, keep the call under `if xm.is_master_ordinal():` or drop `master_only=False` yourself.

    The fix is unsafe: the file then holds CPU tensors, so `torch.load` returns CPU tensors instead of
    tensors on the XLA device (`load_state_dict` copies either way, but code that uses loaded tensors
    directly with XLA tensors needs a `.to(device)`). `xm.save` also rebuilds the containers it walks:
    every dict becomes a plain `dict` (a state dict loses its `OrderedDict` type and its `_metadata`
    of module versions), tuples become lists, objects are shallow-copied, and only plain tensors are
    moved (`type(v) == torch.Tensor`): an `nn.Parameter` inside a saved object stays an XLA tensor.

    ## References
    - [Troubleshooting, "XLA Tensor Quirks" (v2.9.0)](https://github.com/pytorch/xla/blob/v2.9.0/docs/source/learn/troubleshoot.md#xla-tensor-quirks):
      "XLA tensors should be moved to the CPU before saving them"
    - [PyTorch on XLA devices, "Saving and Loading XLA Tensors" (v2.9.0)](https://github.com/pytorch/xla/blob/v2.9.0/docs/source/learn/pytorch-on-xla-devices.md#saving-and-loading-xla-tensors)
    - `torch_xla/core/xla_model.py` at v2.9.0: `save`, `_maybe_convert_to_cpu`
    - `torch/_tensor.py` (`Tensor._reduce_ex_internal`, the `"xla"` device branch)
    """

    code, name, category = "XLA701", "torch-save-of-xla-tensors", "other"
    summary = "`torch.save` of tensors on the XLA device: they load back only onto that device"
    hint = "move them to the CPU first, or save with `xm.save(obj, path)` (master ordinal only by default)"
    xla_only = True
    fix_availability = "sometimes"
    not_for_targets = ("torchtpu",)  # its fix writes `xm.save`, which TPU108 moves away from

    VALID = [
        Valid(
            """
            import torch_xla

            device = torch_xla.device()
            model = Net().to(device)
            torch.save({k: v.cpu() for k, v in model.state_dict().items()}, "model.pt")
            torch.save({"epoch": epoch, "step": step, "best_accuracy": 0.91}, "progress.pt")
            """
        ),
        Valid(
            """
            import torch_xla

            model = Net()  # never moved to the XLA device
            torch.save(model.state_dict(), "init.pt")
            """
        ),
        Valid(
            """
            import torch_xla

            device = torch_xla.device()
            model.to(device)
            train(model)
            model.cpu()
            torch.save(model.state_dict(), "model.pt")
            """
        ),
        Valid(
            """
            import torch
            import torch_xla

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            model = Net().to(device)
            torch.save(model.state_dict(), "model.pt")
            """
        ),
        Valid(
            """
            import torch_xla
            import torch_xla.core.xla_model as xm

            device = xm.xla_device()
            model = Net().to(device)
            if device.type == "cuda":
                torch.save(model.state_dict(), "model.pt")
            else:
                xm.save(model.state_dict(), "model.pt")
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            import torch_xla

            device = torch_xla.device()
            model = Net().to(device)
            train(model)
            torch.save(model.state_dict(), "model.pt")
            """,
            line=7,
            expected_replacement="""
            import torch
            import torch_xla
            import torch_xla.core.xla_model as xm

            device = torch_xla.device()
            model = Net().to(device)
            train(model)
            xm.save(model.state_dict(), "model.pt", master_only=False)
            """,
            applicability=Applicability.UNSAFE,
        ),
        Invalid(
            """
            import torch
            import torch_xla.core.xla_model as xm

            def save_checkpoint(model, optimizer, epoch, path):
                torch.save(
                    {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch},
                    path,
                )

            def _mp_fn(index):
                device = xm.xla_device()
                model = Net()
                model.to(device)
                optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
                for epoch in range(3):
                    train_epoch(model, optimizer)
                    save_checkpoint(model, optimizer, epoch, f"ckpt-{index}-{epoch}.pt")
            """,
            line=5,
            expected_replacement="""
            import torch
            import torch_xla.core.xla_model as xm

            def save_checkpoint(model, optimizer, epoch, path):
                xm.save(
                    {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch},
                    path,
                    master_only=False,
                )

            def _mp_fn(index):
                device = xm.xla_device()
                model = Net()
                model.to(device)
                optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
                for epoch in range(3):
                    train_epoch(model, optimizer)
                    save_checkpoint(model, optimizer, epoch, f"ckpt-{index}-{epoch}.pt")
            """,
            applicability=Applicability.UNSAFE,
        ),
        Invalid(
            """
            import torch
            import torch_xla

            embeddings = torch.randn(1000, 64, device="xla")
            torch.save(embeddings, "embeddings.pt", pickle_protocol=4)  # extra arguments: no fix
            """,
            line=5,
        ),
    ]

    def visit_Call(self, node: ast.Call) -> None:
        if self.ctx.qualified_name(node.func) != "torch.save":
            return
        args = positional(node)
        obj = args[0] if args else keyword_value(node, "obj")
        if obj is None or Placement(self.ctx).of(obj) is not True or self.ctx.in_non_xla_code(node):
            return
        exact = len(node.args) == 2 and len(args) == 2 and not node.keywords and self._moved_by_xm_save(obj)
        self.report(node, fix=(lambda cctx: _use_xm_save(cctx, node)) if exact else None)

    def _moved_by_xm_save(self, obj: ast.expr, depth: int = 0) -> bool:
        """Every XLA tensor `obj` evidently holds is a state dict's or a plain tensor: `xm.save` moves
        only objects of type `torch.Tensor` (not the `nn.Parameter`s of a module saved whole)."""
        if depth > 3:
            return False
        if isinstance(obj, ast.Dict):
            return all(self._moved_by_xm_save(v, depth + 1) for v in obj.values)
        if isinstance(obj, (ast.List, ast.Tuple, ast.Set)):
            return all(self._moved_by_xm_save(e, depth + 1) for e in obj.elts)
        if Placement(self.ctx).of(obj) is not True:
            return True
        if isinstance(obj, ast.Call) and method_name(obj) == "state_dict":
            return True
        if isinstance(obj, ast.Name):
            values = self.ctx.reaching_values(obj)
            if len(values) == 1 and isinstance(values[0], (ast.Dict, ast.List, ast.Tuple, ast.DictComp)):
                return self._moved_by_xm_save(values[0], depth + 1)
        if isinstance(obj, ast.DictComp):
            return True  # built of its values: plain tensors unless they are parameters themselves
        return not self._is_module(obj)

    def _is_module(self, obj: ast.expr) -> bool:
        """`obj` is used as a module somewhere in the file: called, or asked for its parameters."""
        name = dotted_name(obj)
        return bool(name) and any(
            dotted_name(call.func) == name
            or method_name(call) in MODULE_METHODS
            and dotted_name(receiver(call)) == name
            for call in self.ctx.index.calls
        )


def _use_xm_save(cctx: CstContext, node: ast.Call) -> Fix | None:
    call = cctx.locate(node)
    if not isinstance(call, cst.Call) or len(call.args) != 2:
        return None
    module, imports = _xla_model(cctx, call)
    first, last = call.args
    template = cctx.parse_expression("f(master_only=False)")
    assert isinstance(template, cst.Call)  # parsed from a call's text
    keyword = template.args[0]
    # the new argument takes the last one's comma (a trailing comma, its line break before `)`), and
    # the last one the comma after the first (the spacing between arguments)
    args = [first, last.with_changes(comma=first.comma), keyword.with_changes(comma=last.comma)]
    replacement = call.with_changes(func=cctx.parse_expression(f"{module}.save"), args=args)
    return Fix.replace(
        call,
        replacement,
        title=f"Use `{module}.save(..., master_only=False)` (saves CPU tensors)",
        safe=False,
        imports=imports,
    )


def _xla_model(cctx: CstContext, call: cst.Call) -> tuple[str, list[ImportRequest]]:
    """How the fixed call spells `torch_xla.core.xla_model`, and the import it needs."""
    bound = cctx.bound_name(XM, call)
    if bound is not None:
        return bound, []
    beside = next(
        (
            b.name
            for b in cctx.index.import_bindings
            if b.qualified.split(".")[0] == "torch_xla" and isinstance(b.scope, cst.Module)
        ),
        None,
    )
    if "xm" not in cctx.index.bare_names:
        return "xm", [ImportRequest(XM, asname="xm", beside=beside)]
    return XM, [ImportRequest(XM, beside=beside)]
