"""XLA107 python-builtin-over-tensor: Flags Python builtins that walk a device tensor element by
element on a per-step path."""

from __future__ import annotations

import ast

from xlalint.analysis.names import dotted_name, keyword, last_part, method_name, receiver, string_value
from xlalint.analysis.tensors import Kind, evident_device_tensor
from xlalint.rule import Invalid, Rule, Valid


class PythonBuiltinOverTensor(Rule):
    """## What it does
    Flags Python builtins that walk a device tensor element by element on a per-step path:
    `any(t)`, `all(t)`, `max(t)`, `min(t)` and `sum(t)` with a single argument that is a device tensor
    (or, for `any`/`all`/`max`/`min`, a list or generator of device tensor values, as in
    `any(torch.isinf(p.grad).any() for p in params)`), and indexing a Python list, tuple, string or
    range, or a numpy array, with a device tensor (`classes[logits.argmax()]`, `weights[label]` for
    each `label` of a device tensor). Also a `for` loop over a device tensor
    whose length depends on its values (`for e in hits.nonzero():`, the eager mixture-of-experts loop).

    ## Why is this bad?
    Iterating a tensor in Python (`Tensor.__iter__`, `torch/_tensor.py`) unbinds it into 0-d tensors.
    `any`/`all` then take each element's truth value (`Tensor.__bool__`) and `max`/`min` compare
    elements with `>`/`<` and take the truth value of each comparison: every one is a
    device-to-host read (`aten::_local_scalar_dense`), and on XLA each executes the pending graph.
    `sum(t)` reads nothing but traces one slice and one add per element, where `t.sum(0)` is one op.
    A Python sequence indexed with a tensor calls `Tensor.__index__`, which reads the value on the
    host; so does a numpy array indexed with a 0-d tensor (any other tensor is copied to the host
    whole, through `Tensor.__array__`).
    Measured with torch 2.13 (host reads): `any` over 5 elements 2 (until the first true),
    `max` over 5 elements 4, `any(isinf(g).any() for g in 4 grads)` 4, `classes[logits.argmax()]` 1.

    A loop over `t.nonzero()` first needs the number of rows, which only the data knows: one read
    of the count, and the loop body is traced once per element found, so each step compiles a
    graph of a different length.

    Not reported: these builtins over Python numbers, shapes or lengths, `sum` over a list or
    generator of device tensors (adding tensors stays on the device), and `dict` lookups with a
    tensor key (tensors hash by identity: no read).

    ## Example
    ```python
    for x, y in loader:
        logits = model(x)
        loss = loss_fn(logits, y)
        loss.backward()
        if any(torch.isinf(p.grad).any() for p in model.parameters()):
            optimizer.zero_grad()
        label = classes[logits[0].argmax()]
    ```

    Use instead:
    ```python
    for x, y in loader:
        logits = model(x)
        loss = loss_fn(logits, y)
        loss.backward()
        found_inf = torch.stack([torch.isinf(p.grad).any() for p in model.parameters()]).any()
        # keep `found_inf` on the device (`torch.where`), or read it every N steps
        pred = logits[0].argmax()  # map it to a class name after the loop or in a step closure
    ```

    Use the tensor's own reductions (`t.any()`, `t.all()`, `t.max()`, `t.sum(0)`, `torch.stack(...)`)
    and read the result, if at all, every N steps.

    ## References
    - `Tensor.__iter__`: `torch/_tensor.py` (torch 2.13)
    - `Tensor.__index__`: `THPVariable_index_scalar` calls `item<int64_t>()`,
      `tools/autograd/templates/python_variable_methods.cpp` (pytorch)
    - tensor values read before `torch_xla.sync()`:
      https://github.com/pytorch/xla/blob/v2.9.0/docs/source/learn/troubleshoot.md
    """

    code, name, category = "XLA107", "python-builtin-over-tensor", "item_sync"
    evidence = ("step",)
    summary = "device tensor values read on the host on a per-step path: {detail}"
    hint = (
        "use the tensor's own reduction (`t.any()`, `t.max()`, `t.sum(0)`, `torch.stack(...)`) and keep the "
        "result on the device"
    )

    BUILTINS = {
        "any": "`any()` tests each element's truth value, one host read per element",
        "all": "`all()` tests each element's truth value, one host read per element",
        "max": "`max()` compares the elements, one host read per comparison",
        "min": "`min()` compares the elements, one host read per comparison",
        "sum": "`sum()` adds the elements one by one, one traced slice and add per element",
    }

    VALID = [
        Valid(
            """
            import numpy as np

            CLASS_WEIGHTS = np.array([1.0, 4.0, 2.0])

            for x, y in loader:  # a plain DataLoader: host tensors
                weights = torch.as_tensor(CLASS_WEIGHTS[y.numpy()]).to(device)
                loss = (loss_fn(model(x.to(device)), y.to(device)) * weights).mean()
                loss.backward()
                optimizer.step()
            """
        ),
        Valid(
            """
            for x, y in loader:
                loss = loss_fn(model(x), y)
                loss.backward()
                longest = max(len(s) for s in texts)
                lr = min(scheduler.get_last_lr())
                ok = all(p.grad is not None for p in model.parameters())
                biggest = max([0.5, 1.5, float(step)])
            """
        ),
        Valid(
            """
            def forward(self, x):
                losses = [self.head_a(x).mean(), self.head_b(x).mean()]
                total = sum(losses)  # adds device tensors: stays on the device
                norm = sum(p.norm() ** 2 for p in self.parameters())
                return total + norm
            """
        ),
        Valid(
            """
            for x, y in loader:
                logits = model(x)
                loss = loss_fn(logits, y)
                loss.backward()
            classes = ["cat", "dog"]
            print(classes[logits[0].argmax()])  # once, after training
            """
        ),
        Valid(
            """
            def forward(self, x, mask):
                h, lengths = self.embed(x, mask)  # a tensor and, here, a list of ints
                longest = max(lengths)
                ready = any([is_text_model(self.cfg), is_vision_model(self.cfg)])
                return h[:, :longest]
            """
        ),
        Valid(
            """
            for x, y in loader:
                batch = torch.tensor([1, 0, 1])  # a CPU tensor
                loss = loss_fn(model(x), y)
                loss.backward()
                seen = any(batch)
            """
        ),
        Valid(
            """
            def forward(self, hidden, router_logits):
                top = router_logits.argmax(-1)
                for e in range(self.num_experts):  # a static count: every expert, masked
                    hidden = hidden + self.experts[e](hidden) * (top == e).unsqueeze(-1)
                rows, cols = (top > 0).nonzero(as_tuple=True)  # a tuple of two tensors
                for ids in (rows, cols):
                    hidden = hidden + ids.sum()
                return hidden
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch

            def forward(self, hidden: torch.Tensor, expert_mask: torch.Tensor):
                hit = torch.greater(expert_mask.sum(dim=(-1, -2)), 0).nonzero()
                for expert_idx in hit:
                    hidden = hidden + self.experts[expert_idx](hidden)
                return hidden
            """,
            line=5,
        ),
        Invalid(
            """
            import torch
            for x, y in loader:
                loss = loss_fn(model(x), y)
                loss.backward()
                if any(torch.isinf(p.grad).any() for p in model.parameters()):
                    optimizer.zero_grad()
                optimizer.step()
            """,
            line=5,
        ),
        Invalid(
            """
            def training_step(self, batch, batch_idx):
                logits = self.model(batch["x"])
                worst = max(logits.max(dim=-1).values)
                return logits.sum() + worst
            """,
            line=3,
        ),
        Invalid(
            """
            import numpy as np

            CLASS_WEIGHTS = np.array([1.0, 4.0, 2.0])

            def training_step(self, batch, batch_idx):
                logits = self.model(batch["x"])
                weight = 0.0
                for label in logits.argmax(-1):  # the weight of each predicted class
                    weight += CLASS_WEIGHTS[label]
                return self.loss(logits, batch["y"]) * weight
            """,
            line=9,
        ),
        Invalid(
            """
            def forward(self, x):
                scores = self.classifier(x)
                labels = ["neg", "pos"]
                self.last = labels[scores[0].argmax()]
                return scores
            """,
            line=4,
        ),
        Invalid(
            """
            import torch

            def forward(self, x):
                per_row = torch.abs(self.proj(x)).mean(-1)
                return sum(per_row)
            """,
            line=5,
        ),
    ]

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if not isinstance(func, ast.Name) or func.id not in self.BUILTINS or not self._builtin(func):
            return
        if (
            len(node.args) != 1
            or isinstance(node.args[0], ast.Starred)
            or any(k.arg != "default" or func.id not in ("max", "min") for k in node.keywords)
        ):
            return
        arg = node.args[0]
        if isinstance(arg, (ast.GeneratorExp, ast.ListComp)):
            # a sum of device tensors stays on the device; a truth test or comparison of each does not
            if func.id == "sum" or not self._device(arg.elt):
                return
        elif func.id == "sum":
            if not evident_device_tensor(self.ctx, arg) or self._sequence(arg):
                return  # `sum(losses)` over a list or tuple of tensors: a few adds
        elif isinstance(arg, (ast.List, ast.Tuple)):
            if not arg.elts or not all(self._device(e) for e in arg.elts):
                return  # `max([loss_a, loss_b])`: every element a device value
        elif not self._device(arg):
            return
        if self.ctx.runs_hot(node):
            self.report(node, self.summary.format(detail=self.BUILTINS[func.id]))

    def visit_Subscript(self, node: ast.Subscript) -> None:
        index = node.slice
        parts = [index.lower, index.upper, index.step] if isinstance(index, ast.Slice) else [index]
        if not any(p is not None and self._device(p) for p in parts):
            return
        container = self._host_sequence(node.value)
        if container is not None and self.ctx.runs_hot(node):
            self.report(
                node,
                self.summary.format(
                    detail=f"indexing a {'' if container == 'numpy array' else 'Python '}{container} with a device "
                    "tensor (`__index__`)"
                ),
            )

    def visit_For(self, node: ast.For) -> None:
        if self._data_sized(node.iter) and self.ctx.runs_hot(node.iter):
            self.report(
                node.iter,
                self.summary.format(
                    detail="a `for` loop over a tensor sized by its values (`nonzero`, `unique`): one slice traced "
                    "per element"
                ),
            )

    def _data_sized(self, expr: ast.expr, depth: int = 0) -> bool:
        """`expr` is a device tensor whose first dimension is data-dependent: the result of
        `nonzero`/`argwhere`/`unique`/`masked_select` (without a static `size=`), or a reshape,
        cast or row slice of one."""
        if depth > 4:
            return False
        if isinstance(expr, ast.Name):
            values = self.ctx.reaching_values(expr)
            return bool(values) and all(not _unpacked(self.ctx, v) and self._data_sized(v, depth + 1) for v in values)
        if isinstance(expr, ast.Subscript):  # `hits[:, 0]`
            return self._data_sized(expr.value, depth + 1)
        if not isinstance(expr, ast.Call):
            return False
        qualified = self.ctx.qualified_name(expr.func) or ""
        functional = qualified.startswith("torch.")
        name = last_part(qualified) if functional else method_name(expr)
        subject = (expr.args[0] if expr.args else None) if functional else receiver(expr)
        if subject is None:
            return False
        if name in _LENGTH_KEEPING and not functional:
            return self._data_sized(subject, depth + 1)
        if name not in _DATA_SIZED or keyword(expr, "size") is not None or keyword(expr, "as_tuple") is not None:
            return False
        return self._device(subject)

    def _builtin(self, name: ast.Name) -> bool:
        """`name` is Python's builtin: no import, module-level binding, parameter or local of that name."""
        return (
            name.id not in self.ctx.index.imports
            and name.id not in self.ctx.index.module_names
            and not self.ctx.reaching_values(name)
            and self.ctx.parameter(name) is None
        )

    def _device(self, expr: ast.expr, depth: int = 0) -> bool:
        """`expr` is one device tensor value, by what computes it: a torch op, an operator or a tensor
        method over a device value, a gradient, a name a model output is assigned to, or an element
        of one. Not a value unpacked from a call's results (`h, lengths = self.embed(x)` may return
        Python lists), nor whatever a plain function returns."""
        if depth > 4:
            return False
        if evident_device_tensor(self.ctx, expr):
            return True
        if self.ctx.tensor_kind(expr) != Kind.DEVICE:
            return False
        if isinstance(expr, ast.Compare):
            return any(self._device(o, depth + 1) for o in (expr.left, *expr.comparators))
        if isinstance(expr, ast.BinOp):
            return any(self._device(o, depth + 1) for o in (expr.left, expr.right))
        if isinstance(expr, ast.UnaryOp):
            return self._device(expr.operand, depth + 1)
        if isinstance(expr, ast.Subscript):
            return self._device(expr.value, depth + 1)
        if isinstance(expr, ast.Attribute):
            return expr.attr == "grad" or self._device(expr.value, depth + 1)
        if isinstance(expr, ast.Call):
            recv = receiver(expr)
            return recv is not None and dotted_name(recv) not in ("self", "cls") and self._device(recv, depth + 1)
        if isinstance(expr, ast.Name):
            values = self.ctx.reaching_values(expr)
            if values:
                return all(
                    not _unpacked(self.ctx, v)
                    and (
                        self._device(v, depth + 1) or isinstance(v, ast.Call) and self.ctx.tensor_kind(v) == Kind.DEVICE
                    )
                    for v in values
                )
            return any(self._device(it, depth + 1) for it in self.ctx.loop_iterables(expr))
        return False

    def _sequence(self, expr: ast.expr, depth: int = 0) -> bool:
        """A Python sequence of tensors: a display, or a torch op that returns a tuple."""
        if isinstance(expr, (ast.List, ast.Tuple, ast.ListComp, ast.GeneratorExp)):
            return True
        if isinstance(expr, ast.Call):
            name = method_name(expr) or last_part(self.ctx.qualified_name(expr.func))
            return name in _TUPLE_OPS or (name in _TUPLE_WITH_DIM and bool(expr.args or expr.keywords))
        if isinstance(expr, (ast.Name, ast.Attribute)) and depth < 3:
            return any(self._sequence(v, depth + 1) for v in self.ctx.assigned_values(expr))
        return False

    def _host_sequence(self, expr: ast.expr, depth: int = 0) -> str | None:
        """What kind of Python sequence the code built here, if it evidently is one."""
        if isinstance(expr, (ast.List, ast.ListComp)):
            return "list"
        if isinstance(expr, ast.Tuple):
            return "tuple"
        if isinstance(expr, ast.JoinedStr) or string_value(expr) is not None:
            return "string"
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and self._builtin(expr.func):
            return {"list": "list", "sorted": "list", "tuple": "tuple", "range": "range", "str": "string"}.get(
                expr.func.id
            )
        if isinstance(expr, ast.Call):
            qualified = self.ctx.qualified_name(expr.func) or ""
            if qualified.split(".")[0] == "numpy" and last_part(qualified) in _NUMPY_ARRAYS:
                return "numpy array"  # `__index__` for a 0-d tensor, `__array__` (a copy to the host) otherwise
        if isinstance(expr, (ast.Name, ast.Attribute)) and depth < 3:
            found = {
                None if _unpacked(self.ctx, v) else self._host_sequence(v, depth + 1)
                for v in self.ctx.assigned_values(expr)
            }
            return found.pop() if len(found) == 1 else None
        return None


def _unpacked(ctx, value: ast.expr) -> bool:
    """`value` is assigned by unpacking (`a, b = value`): each target gets only a part of it."""
    parent = ctx.parent(value)
    return isinstance(parent, ast.Assign) and any(
        isinstance(t, (ast.Tuple, ast.List, ast.Starred)) for t in parent.targets
    )


# torch ops (functions or methods) that return a tuple of tensors, always or when given a dim
_TUPLE_OPS = {
    "split",
    "chunk",
    "unbind",
    "tensor_split",
    "hsplit",
    "vsplit",
    "dsplit",
    "split_with_sizes",
    "meshgrid",
    "broadcast_tensors",
    "topk",
    "sort",
    "aminmax",
    "frexp",
    "std_mean",
    "var_mean",
    "cummax",
    "cummin",
    "kthvalue",
    "slogdet",
    "svd",
    "qr",
    "eig",
    "eigh",
    "unique_consecutive",
}
_TUPLE_WITH_DIM = {"max", "min", "median", "nanmedian", "mode", "where", "nonzero", "unique"}
# numpy functions that build an array on the host
_NUMPY_ARRAYS = {"array", "asarray", "zeros", "ones", "full", "arange", "linspace", "load", "empty", "eye"}
# ops whose result has as many rows as the data says, and methods that keep the number of rows
_DATA_SIZED = {"nonzero", "argwhere", "unique", "unique_consecutive", "masked_select"}
_LENGTH_KEEPING = {"squeeze", "flatten", "view", "reshape", "long", "int", "to", "detach", "contiguous", "clone"}
