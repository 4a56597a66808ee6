"""XLA504 gradient-reading-helper-in-step: Flags a per-step call of a function of another module of the
project that reads the gradients of the model it is given to the host on every call."""

from __future__ import annotations

import ast

from xlalint.analysis.reads import argument_reads
from xlalint.rule import Invalid, Rule, Valid

# -- XLA504 ----------------------------------------------------------------------------------------


class GradientReadingHelperInStep(Rule):
    """## What it does
    Flags a per-step call of a function of another module of the project that reads the gradients
    of the model it is given to the host on every call: a hand-written clipping helper that takes
    `p.grad.norm().item()` per parameter (or branches on it), or a gradient-norm logger.

    ## Why is this bad?
    Each read is a host sync: the step's pending graph executes and the value is copied to the
    host, once per parameter for a per-parameter loop, before the optimizer has stepped. The step is
    cut into as many graphs. Inside the helper this is easy to miss (it looks like setup code); the
    cost is paid at the call made every step, so the call is reported, with the line of the read.
    `torch.nn.utils.clip_grad_norm_` (or `xlalint.runtime.clip_grad_norm_`) clips on the device
    without reading anything.

    ## Example
    ```python
    # utils.py
    def clip_gradients(model, clip):
        norms = []
        for p in model.parameters():
            if p.grad is not None:
                param_norm = p.grad.norm(2)
                norms.append(param_norm.item())
                clip_coef = clip / (param_norm + 1e-6)
                if clip_coef < 1:
                    p.grad.mul_(clip_coef)
        return norms

    # train.py
    for x, y in loader:
        loss_fn(model(x), y).backward()
        utils.clip_gradients(model, 3.0)
        optimizer.step()
    ```

    Use instead:
    ```python
    for x, y in loader:
        loss_fn(model(x), y).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 3.0)  # one norm, on the device
        optimizer.step()
    ```

    ## Fix safety
    No automatic fix: the helper may clip each parameter by its own norm, which `clip_grad_norm_`
    does not.
    """

    code, name, category = "XLA504", "gradient-reading-helper-in-step", "clip_grad_norm"
    evidence = ("step",)
    summary = (
        "`{helper}()` reads the gradients of the model passed as `{param}` to the host "
        "({what} at {where}): a sync every step"
    )
    hint = "clip with `torch.nn.utils.clip_grad_norm_` (no host read), or log gradient norms every N steps"

    UTILS = {
        "utils.py": """
        def clip_gradients(model, clip):
            norms = []
            for name, p in model.named_parameters():
                if p.grad is not None:
                    param_norm = p.grad.data.norm(2)
                    norms.append(param_norm.item())
                    clip_coef = clip / (param_norm + 1e-6)
                    if clip_coef < 1:
                        p.grad.data.mul_(clip_coef)
            return norms
        """
    }

    VALID = [
        Valid(
            """
            import utils

            for step, (x, y) in enumerate(loader):
                loss_fn(model(x), y).backward()
                if step % 100 == 0:
                    utils.clip_gradients(model, 3.0)
                optimizer.step()
            """,
            modules=UTILS,
        ),
        Valid(
            """
            import utils

            for x, y in loader:
                loss_fn(model(x), y).backward()
                optimizer.step()
            utils.clip_gradients(model, 3.0)
            """,
            modules=UTILS,
        ),
    ]
    INVALID = [
        Invalid(
            """
            import utils

            for x, y in loader:
                loss_fn(model(x), y).backward()
                utils.clip_gradients(model, 3.0)
                optimizer.step()
            """,
            line=5,
            modules=UTILS,
        ),
    ]

    def visit_Call(self, node: ast.Call) -> None:
        for helper, where, read, _ in argument_reads(self.ctx, node, through="grads"):
            if self.ctx.runs_hot(node):
                self.report(
                    node, self.summary.format(helper=helper, param=read.param, what=f"`{read.what}`", where=where)
                )
            return
