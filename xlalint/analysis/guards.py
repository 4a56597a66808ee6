"""Branch guards: code that never runs on XLA, or runs only every N steps.

An expert does not flag `.item()` in `if torch.cuda.is_available():`, after `device.type == "xla" or`,
or in `if step % log_every == 0:` (periodic logging). Tests are classified by the words they use.
"""

from __future__ import annotations

import ast
import re

from .names import dotted_name, is_constant, is_string

# Words that name a non-XLA backend or feature; a branch taken only when they hold never runs on XLA.
NON_XLA = re.compile(
    r"(^|_)(cuda|cudnn|mps|hpu|npu|xpu|mlu|musa|neuron|neuronx|sagemaker|flash|triton|ipex|gpu|habana|"
    r"deepspeed|apex|rocm|hip)($|_)",
    re.I,
)
XLA = re.compile(r"(^|_)(xla|tpu|torch_xla|xm|xr|torchax|spmd)($|_)|_xla$|^xla|is_tpu|on_tpu|use_tpu", re.I)

POSITIVE, NEGATIVE, UNKNOWN = 1, -1, 0  # the branch runs on XLA / never on XLA / can't tell


def words(node: ast.AST) -> list[str]:
    """Identifiers, attribute names and non-empty strings in `node`."""
    found: list[str] = []
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            found.append(n.id)
        elif isinstance(n, ast.Attribute):
            found.append(n.attr)
        elif isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value:
            found.append(n.value)
    return found


def xla_polarity(test: ast.expr) -> int:
    """POSITIVE if `test` holds only on XLA, NEGATIVE if only off XLA, else UNKNOWN."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return -xla_polarity(test.operand)
    if isinstance(test, ast.BoolOp):
        sides = [xla_polarity(v) for v in test.values]
        if isinstance(test.op, ast.And):
            # the body needs all, so one non-XLA side pins it; its else branch may still run on XLA
            return NEGATIVE if NEGATIVE in sides else UNKNOWN
        return sides[0] if len(set(sides)) == 1 else UNKNOWN
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        op, comparator = test.ops[0], test.comparators[0]
        negated = isinstance(op, (ast.NotEq, ast.IsNot, ast.NotIn))
        if is_constant(comparator, None):
            # `xm is None` / `xm is not None`: an XLA module that failed to import
            if XLA.search(dotted_name(test.left) or ""):
                return POSITIVE if negated else NEGATIVE
            return UNKNOWN
        if not isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn, ast.Is, ast.IsNot)):
            return UNKNOWN
        polarity = _word_polarity(words(test))
        return -polarity if negated else polarity
    if isinstance(test, (ast.Name, ast.Attribute, ast.Call)):
        return _word_polarity(words(test))
    return UNKNOWN


def _word_polarity(found: list[str]) -> int:
    xla = any(XLA.search(w) for w in found)
    non_xla = any(NON_XLA.search(w) for w in found)
    if xla and not non_xla:
        return POSITIVE
    if non_xla and not xla:
        return NEGATIVE
    return UNKNOWN


# Flags and counters that gate logging, evaluation or checkpointing: such blocks run every N steps.
PERIODIC_WORDS = re.compile(
    r"(^|_)(should_)?(log|logging|print|report|display|eval|evaluate|evaluation|save|checkpoint|ckpt|"
    r"verbose|profile|visualize|plot)(_(every|interval|freq|frequency|steps|step|now))?($|_)|"
    r"(log|print|eval|save)_(every|interval|freq|frequency|steps)",
    re.I,
)


def is_periodic(test: ast.expr) -> bool:
    """`step % log_every == 0`, `not step % N`, `if self.control.should_log:`: once every N steps."""
    if any(PERIODIC_WORDS.search(word) for word in words(test) if "." not in word):
        return True
    return any(
        isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod) and not is_string(n.left)
        for n in ast.walk(test)
    )


def exits_block(body: list[ast.stmt]) -> bool:
    """The block ends in return/raise/continue/break: code after the `if` is the other branch."""
    return bool(body) and isinstance(body[-1], (ast.Return, ast.Raise, ast.Continue, ast.Break))


def returns(body: list[ast.stmt]) -> bool:
    return bool(body) and isinstance(body[-1], ast.Return)
