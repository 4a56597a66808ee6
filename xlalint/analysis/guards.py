"""Branch guards: code that never runs on XLA, or runs only every N steps.

An expert does not flag `.item()` in `if torch.cuda.is_available():`, after `device.type == "xla" or`,
or in `if step % log_every == 0:` (periodic logging). Tests are classified by the words they use.
"""

from __future__ import annotations

import re

import libcst as cst

from .names import dotted_name, string_value

# Words that name a non-XLA backend or feature; a branch taken only when they hold never runs on XLA.
NON_XLA = re.compile(
    r"(^|_)(cuda|cudnn|mps|hpu|npu|xpu|mlu|musa|neuron|neuronx|sagemaker|flash|triton|ipex|gpu|habana|"
    r"deepspeed|apex|rocm|hip)($|_)",
    re.I,
)
XLA = re.compile(r"(^|_)(xla|tpu|torch_xla|xm|xr|torchax|spmd)($|_)|_xla$|^xla|is_tpu|on_tpu|use_tpu", re.I)

POSITIVE, NEGATIVE, UNKNOWN = 1, -1, 0  # the branch runs on XLA / never on XLA / can't tell


def words(node: cst.CSTNode) -> list[str]:
    words: list[str] = []

    class Collect(cst.CSTVisitor):
        def visit_Name(self, n: cst.Name) -> None:
            words.append(n.value)

        def visit_Attribute(self, n: cst.Attribute) -> None:
            words.append(n.attr.value)

        def visit_SimpleString(self, n: cst.SimpleString) -> None:
            value = string_value(n)
            if value:
                words.append(value)

    node.visit(Collect())
    return words


def xla_polarity(test: cst.BaseExpression) -> int:
    """POSITIVE if `test` holds only on XLA, NEGATIVE if only off XLA, else UNKNOWN."""
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        return -xla_polarity(test.expression)
    if isinstance(test, cst.BooleanOperation):
        left, right = xla_polarity(test.left), xla_polarity(test.right)
        if isinstance(test.operator, cst.And):
            # the body needs both, so one non-XLA side pins it; its else branch may still run on XLA
            return NEGATIVE if NEGATIVE in (left, right) else UNKNOWN
        return left if left == right else UNKNOWN
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
        target = test.comparisons[0]
        op = target.operator
        negated = isinstance(op, (cst.NotEqual, cst.IsNot, cst.NotIn))
        if isinstance(target.comparator, cst.Name) and target.comparator.value == "None":
            # `xm is None` / `xm is not None`: an XLA module that failed to import
            left = XLA.search(dotted_name(test.left) or "")
            if left:
                return POSITIVE if negated else NEGATIVE
            return UNKNOWN
        if not isinstance(op, (cst.Equal, cst.NotEqual, cst.In, cst.NotIn, cst.Is, cst.IsNot)):
            return UNKNOWN
        polarity = _word_polarity(words(test))
        return -polarity if negated else polarity
    if isinstance(test, (cst.Name, cst.Attribute, cst.Call)):
        return _word_polarity(words(test))
    return UNKNOWN


def _word_polarity(words: list[str]) -> int:
    xla = any(XLA.search(w) for w in words)
    non_xla = any(NON_XLA.search(w) for w in words)
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


def is_periodic(test: cst.BaseExpression) -> bool:
    """`step % log_every == 0`, `not step % N`, `if self.control.should_log:`: once every N steps."""
    if any(PERIODIC_WORDS.search(word) for word in words(test) if "." not in word):
        return True
    found = False

    class FindModulo(cst.CSTVisitor):
        def visit_BinaryOperation(self, n: cst.BinaryOperation) -> None:
            nonlocal found
            if isinstance(n.operator, cst.Modulo) and not isinstance(n.left, (cst.SimpleString, cst.FormattedString)):
                found = True

    test.visit(FindModulo())
    return found


def exits_block(body: cst.BaseSuite) -> bool:
    """The block ends in return/raise/continue/break: code after the `if` is the other branch."""
    statements = body.body if isinstance(body, cst.IndentedBlock) else [body]
    last = statements[-1] if statements else None
    if isinstance(last, cst.SimpleStatementLine):
        small = last.body[-1] if last.body else None
        return isinstance(small, (cst.Return, cst.Raise, cst.Continue, cst.Break))
    if isinstance(last, cst.SimpleStatementSuite):
        small = last.body[-1] if last.body else None
        return isinstance(small, (cst.Return, cst.Raise, cst.Continue, cst.Break))
    return False
