"""Branch guards: code that never runs on XLA, or runs only every N steps.

An expert does not flag `.item()` in `if torch.cuda.is_available():`, after `device.type == "xla" or`,
or in `if step % log_every == 0:` (periodic logging). Tests are classified by the words they use.
"""

from __future__ import annotations

import ast
import re

from .names import dotted_name, is_constant, is_string, string_value

# Words that name a non-XLA backend or feature; a branch taken only when they hold never runs on XLA.
NON_XLA = re.compile(
    r"(^|_)(cuda|cudnn|mps|hpu|npu|xpu|mlu|musa|neuron|neuronx|sagemaker|flash|triton|ipex|gpu|habana|"
    r"deepspeed|apex|rocm|hip)($|_)",
    re.I,
)
# Features built on Inductor or CUDA kernels (a dispatch table's `"flex_attention": ...` entry).
NON_XLA_FEATURES = re.compile(r"^flex_attention", re.I)
XLA = re.compile(r"(^|_)(xla|tpu|torch_xla|xm|xr|torchax|spmd)($|_)|_xla$|^xla|is_tpu|on_tpu|use_tpu", re.I)

POSITIVE, NEGATIVE, UNKNOWN = 1, -1, 0  # the branch runs on XLA / never on XLA / can't tell


def names_non_xla_feature(key: str) -> bool:
    """A dispatch key such as `"flash_attention_2"`, `"cuda"` or `"flex_attention"`: what it selects
    never runs on XLA."""
    return bool(NON_XLA.search(key) or NON_XLA_FEATURES.search(key))


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


def names_non_xla_backend(class_name: str) -> bool:
    """`GemmaFlashAttention2`, `CudaGraphRunner`, `MPSBackend`: a class written for another backend
    (CamelCase words are split; `CUDA`-only names count, `XLA` ones do not)."""
    parts = re.findall(r"[A-Z]+(?=[A-Z][a-z]|\d|$)|[A-Z]?[a-z]+|\d+", class_name)
    return any(NON_XLA.search(p) for p in parts) and not any(XLA.search(p) for p in parts)


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
        if isinstance(op, (ast.Eq, ast.NotEq)) and _cpu_device_test(test.left, comparator):
            return POSITIVE if negated else NEGATIVE  # `t.device == torch.device("cpu")`: a host tensor
        polarity = _word_polarity(words(test))
        return -polarity if negated else polarity
    if isinstance(test, (ast.Name, ast.Attribute, ast.Call)):
        return _word_polarity(words(test))
    return UNKNOWN


def _cpu_device_test(left: ast.expr, right: ast.expr) -> bool:
    """A device (`t.device`, `t.device.type`, `device`) compared with the CPU (`"cpu"`,
    `torch.device("cpu")`): XLA tensors are never there."""

    def cpu(node: ast.expr) -> bool:
        if isinstance(node, ast.Call) and dotted_name(node.func) in ("torch.device", "device") and node.args:
            node = node.args[0]
        return string_value(node) == "cpu"

    def device(node: ast.expr) -> bool:
        name = dotted_name(node) or ""
        return name.split(".")[-1] in ("device", "device_type") or name.endswith(".device.type")

    return (cpu(right) and device(left)) or (cpu(left) and device(right))


def _word_polarity(found: list[str]) -> int:
    xla = any(XLA.search(w) for w in found)
    non_xla = any(NON_XLA.search(w) for w in found)
    if xla and not non_xla:
        return POSITIVE
    if non_xla and not xla:
        return NEGATIVE
    return UNKNOWN


# Decision flags (`should_log`, `self.control.should_save`, `do_eval`, `log_now`) and counters
# (`log_every`) of logging, evaluation or checkpointing: a block they gate runs every N steps. A
# word must *end* with the activity: `log_writer` or `eval_loader` name objects, not decisions.
PERIODIC_WORDS = re.compile(
    r"^_*(should|do|need|time_to)_\w+|^_*(its_?time|is_time)(_\w+)?$|"  # `if u.itstime(step, every_n):`
    # `if is_metric_step:`, `if eval_due:` (not `is_digit_step`: which kind of step, not how often)
    r"^_*is_(log|logging|metric|metrics|eval|val|validation|save|checkpoint|ckpt|print|report|display)_"
    r"(step|iter|iteration|time|epoch)$|(^|_)(log|logging|metric|metrics|eval|val|save|checkpoint|ckpt)_due$|"
    r"(^|_)(log|logging|print|report|display|eval|evaluate|evaluation|validate|validation|save|checkpoint|ckpt|"
    r"verbose|profile|visualize|plot)(_(every|interval|freq|frequency|steps|step|now|iter|iteration|period))?$|"
    r"(log|print|eval|save|val|ckpt|checkpoint|display|report)_(every|interval|freq|frequency|steps|period)",
    re.I,
)
EVERY_N, ALMOST_ALWAYS = 1, -1  # periodic_polarity: true once every N steps / false once every N steps


def periodic_polarity(test: ast.expr) -> int:
    """EVERY_N when `test` holds once every N steps (`step % N == 0`, `not step % N`, `should_log`),
    ALMOST_ALWAYS when it fails once every N steps (`step % N`, `step % N != 0`, `not should_log`),
    else 0. A block under an EVERY_N test, or after `if <ALMOST_ALWAYS test>: return`, runs every N
    steps; a block under `if step % N:` runs on N-1 of them."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return -periodic_polarity(test.operand)
    if isinstance(test, ast.BoolOp):
        sides = [periodic_polarity(v) for v in test.values]
        if isinstance(test.op, ast.And):  # holds only when every side does
            return EVERY_N if EVERY_N in sides else ALMOST_ALWAYS if all(p == ALMOST_ALWAYS for p in sides) else 0
        return ALMOST_ALWAYS if ALMOST_ALWAYS in sides else EVERY_N if EVERY_N in sides else 0
    if _is_modulo(test):
        return ALMOST_ALWAYS  # `if step % N:` is true whenever step is not a multiple of N
    if isinstance(test, ast.Compare):
        if len(test.ops) == 1 and any(_is_floor_division(side) for side in (test.left, test.comparators[0])):
            return EVERY_N  # `seen // 1_000_000 > last_million`: a counter crossing a multiple of N
        if len(test.ops) == 1 and (_is_modulo(test.left) or _is_modulo(test.comparators[0])):
            op = test.ops[0]
            if isinstance(op, (ast.Eq, ast.Lt, ast.LtE)):
                return EVERY_N  # `step % N == 0`, `step % N < 1`
            return ALMOST_ALWAYS if isinstance(op, (ast.NotEq, ast.Gt, ast.GtE)) else 0
        if all(isinstance(op, (ast.Is, ast.IsNot)) for op in test.ops):
            return 0  # `writer is not None`: whether a thing exists, not how often
    if isinstance(test, (ast.Compare, ast.Name, ast.Attribute, ast.Call)):
        return EVERY_N if any(PERIODIC_WORDS.search(w) for w in words(test) if "." not in w) else 0
    return 0


def is_periodic(test: ast.expr) -> bool:
    """`test` holds once every N steps: the block it guards is not per step."""
    return periodic_polarity(test) == EVERY_N


def _is_floor_division(node: ast.AST) -> bool:
    return isinstance(node, ast.BinOp) and isinstance(node.op, ast.FloorDiv)


def _is_modulo(node: ast.AST) -> bool:
    return isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod) and not is_string(node.left)


def exits_block(body: list[ast.stmt]) -> bool:
    """The block ends in return/raise/continue/break: code after the `if` is the other branch."""
    return bool(body) and isinstance(body[-1], (ast.Return, ast.Raise, ast.Continue, ast.Break))


def returns(body: list[ast.stmt]) -> bool:
    return bool(body) and isinstance(body[-1], ast.Return)


def skips_rest(body: list[ast.stmt]) -> bool:
    """The block ends in `return` or `continue`: the statements after its `if` are skipped."""
    return bool(body) and isinstance(body[-1], (ast.Return, ast.Continue))
