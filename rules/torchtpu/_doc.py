"""The parts every TPU1xx rule's documentation shares."""

OPT_IN = """This rule runs only when the code is being moved to TorchTPU: `--target torchtpu` (or
`target = "torchtpu"` in the configuration), in files that import torch_xla. It is in preview.
The moves are rows of `rules/torchtpu/torchtpu_migrations.toml`, each checked against the
torch-tpu 0.2.0 wheel's own files (or plain PyTorch):

{rows}"""

REFERENCES = """## References
- torch-tpu 0.2.0 on PyPI (`torch>=2.11,<=2.15`): the wheel's `torch_tpu/_loader.py`,
  `torch_tpu/_internal/public_api.py`, `torch_tpu/_internal/compile/`
- TorchTPU's guides: `docs/notebooks/` in google-pytorch/torch_tpu (`api_mapping.py`, `eager_mode.py`)
- PyTorch/XLA's README (April 2026): "Once TorchTPU is public it will replace PyTorch/XLA\""""


def migration_doc(template: str, code: str) -> str:
    """A TPU1xx rule's docs: `template` (indented as in a class body) with `{opt_in}` and
    `{references}` filled in, flush left as the generated docs want them."""
    import textwrap

    from ._migration import rows_doc

    return textwrap.dedent(template).strip().format(opt_in=OPT_IN.format(rows=rows_doc(code)), references=REFERENCES)
