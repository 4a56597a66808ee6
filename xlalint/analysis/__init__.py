"""Context analysis: what a linter needs to know beyond syntax to stay precise.

- `index`: one pre-pass over the tree (parents, imports, functions, assignments, loops).
- `names`: dotted names and import resolution (`xm.mark_step` -> `torch_xla.core.xla_model.mark_step`).
- `steps`: is a node on a per-step path (training loop body, step function, callee of either)?
- `guards`: step-closure callbacks, branches guarded for non-XLA devices, every-N-steps blocks.
- `tensors`: is an expression plausibly a device tensor, a CPU tensor, or not a tensor at all? And
  the evidence of one (a boolean mask, elementwise of a tensor); `placement`: on the XLA device or not.
- `barriers`: the step model (barriers, step loops, who owns the step and reduces the gradients).
- `vocabulary`: the torch / torch_xla names all of the above know.
- `context`: `FileContext`, the facade rules use.
"""
