"""Is an expression a device tensor? A small, flow-aware inference over one function at a time.

Kinds, from least to most tensor-like: NOT_TENSOR (Python numbers, numpy, strings, shapes),
UNKNOWN, CPU (a tensor known to be on the host), TENSOR (a tensor of unknown device), DEVICE (moved
to a device, a model output, a parameter's gradient). Rules report host syncs only on TENSOR/DEVICE.
"""

from __future__ import annotations

import ast
import re
from typing import TYPE_CHECKING, cast

from .compiled import CompiledRegions, compiled_arguments
from .file import Kind
from .index import FUNCTIONS, own_returns, qualname
from .names import (
    dotted_name,
    is_constant,
    keyword,
    keyword_value,
    last_part,
    method_name,
    param_default,
    positional,
    receiver,
    string_value,
)
from .steps import MODEL_CALLEE, is_named_step
from .vocabulary import (
    BOOL_FUNCTIONS,
    BOOL_METHODS,
    ELEMENT_WRAPPERS,
    ELEMENTWISE_FUNCTIONS,
    ELEMENTWISE_METHODS,
    FACTORIES,
    INDEX_FUNCTIONS,
    INDEX_METHODS,
    INDEXED_RESULTS,
    INTEGER_DTYPES,
    LIKE_FACTORIES,
    TENSOR_REDUCTIONS,
)

if TYPE_CHECKING:
    from .file import File


# torch functions that return something other than a device tensor.
TORCH_NOT_TENSOR = {
    "is_tensor",
    "is_floating_point",
    "is_complex",
    "is_nonzero",
    "numel",
    "device",
    "dtype",
    "no_grad",
    "enable_grad",
    "set_grad_enabled",
    "inference_mode",
    "is_grad_enabled",
    "manual_seed",
    "seed",
    "save",
    "load",
    "get_default_dtype",
    "set_default_dtype",
    "Size",
    "Generator",
    "compile",
    "finfo",
    "iinfo",
    "autocast",
    "is_autocast_enabled",
    "get_num_threads",
    "set_num_threads",
    "typename",
    "is_storage",
    "use_deterministic_algorithms",
    "result_type",
    "promote_types",
    "can_cast",
    "equal",
    "allclose",
}
TORCH_NOT_TENSOR_PREFIXES = (
    "torch.cuda.",
    "torch.distributed.",
    "torch.backends.",
    "torch.utils.",
    "torch.jit.",
    "torch.distributions.",
    "torch.optim.",
    "torch.amp.",
    "torch.profiler.",
    "torch.compiler.",
    "torch.autograd.",
    "torch.onnx.",
    "torch.hub.",
    "torch.nn.init.",
)
# torch functions that answer a question or get/set global state: Python values, never tensors
# (private ones too: `torch._C._get_tracing_state()`, `torch._C._is_any_autocast_enabled()`).
TORCH_QUERY = re.compile(r"^_?(is|are|has|get|set|use)_")
# torch_xla collectives: a device tensor in, a device tensor out (`mesh_reduce` is a host collective).
XLA_COLLECTIVES = {
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "all_to_all",
    "collective_permute",
    "send",
    "recv",
    "collective_broadcast",
}
WRAPS_ITS_ARGUMENT = {
    "torch.autograd.Variable",
    "torch.autograd.variable.Variable",
    "torch.nn.Parameter",
    "torch.nn.parameter.Parameter",
}
# Names and operations a rule follows back to decide what a value evidently is
# (`g = p.grad.norm(); coef = max_norm / (g + eps); if coef < 1:` is four steps).
MAX_DEPTH = 8
# `is_clip_model(ckpt)`, `has_head(m)`: questions, answered with Python values.
PREDICATE = re.compile(r"^_*(is|are|has|have|should|can|needs?|uses?)_")
HOST_TYPES = {
    "int",
    "float",
    "bool",
    "str",
    "list",
    "tuple",
    "dict",
    "set",
    "complex",
    "bytes",
    "numbers.Number",
    "numbers.Real",
    "numbers.Integral",
}
# what the fixes rewrite code to call (xlalint.runtime) and that returns a tensor of its argument's device
RUNTIME_TENSOR_FUNCTIONS = {
    f"xlalint.runtime.{name}"
    for name in (
        "masked_sum",
        "masked_mean",
        "masked_max",
        "masked_min",
        "masked_count",
        "nonzero_static",
        "clip_grad_norm_",
    )
}
HOST_METHODS = {
    "item",
    "tolist",
    "numpy",
    "size",
    "dim",
    "ndimension",
    "numel",
    "nelement",
    "element_size",
    "data_ptr",
    "get_device",
    "is_contiguous",
    "is_floating_point",
    "is_complex",
    "storage_offset",
    "stride",
    "untyped_storage",
    "keys",
    "values",
    "items",
    "__len__",
    "format",
    "join",
    "split_",
    "startswith",
    "endswith",
    "lower",
    "upper",
    "strip",
    "state_dict",
    "parameters",
    "named_parameters",
    "modules",
    "children",
    "named_modules",
    "named_children",
    "buffers",
    "register_buffer",
    "apply",
    "train",
    "eval",
    "zero_grad",
    "step",
    "append",
    "extend",
    "insert",
    "pop",
    "get",
    "update",
    "copy",
}
# methods only torch tensors have (numpy arrays and modules lack them): the receiver is a tensor
TENSOR_ONLY_METHODS = {"detach", "detach_", "contiguous", "unsqueeze", "masked_fill", "softmax", "log_softmax"}
SHAPE_ATTRIBUTES = {
    "shape",
    "dtype",
    "device",
    "ndim",
    "is_cuda",
    "requires_grad",
    "is_leaf",
    "layout",
    "names",
    "is_sparse",
    "is_quantized",
    "is_meta",
    "grad_fn",
    "itemsize",
    "nbytes",
}
SAME_KIND_ATTRIBUTES = {"data", "T", "mT", "H", "mH", "real", "imag"}
HOST_MODULES = (
    "numpy",
    "np",
    "math",
    "random",
    "pandas",
    "statistics",
    "json",
    "os",
    "re",
    "time",
    "sys",
    "collections",
    "itertools",
    "functools",
    "operator",
    "string",
    "logging",
    "warnings",
)
PY_BUILTINS_NOT_TENSOR = {
    "len",
    "int",
    "float",
    "bool",
    "str",
    "repr",
    "range",
    "list",
    "dict",
    "set",
    "tuple",
    "isinstance",
    "type",
    "hasattr",
    "getattr",
    "id",
    "hash",
    "round",
    "sorted",
    "enumerate",
    "zip",
    "print",
    "format",
    "open",
    "any",
    "all",
    "iter",
    "next",
    "callable",
    "divmod",
    "ord",
    "chr",
    "hex",
    "bin",
}
# Names that are almost always tensors when nothing else is known about them.
TENSOR_NAME = re.compile(
    r"^(loss|losses|\w+_loss|loss_\w+|logits|\w+_logits|grad_norm|total_norm|norm|preds|pred|predictions|"
    r"outputs|output|out|scores|probs|hidden_states|attn_weights|attention_mask|mask|\w+_mask|labels|"
    r"targets|target|input_ids|x|y|inputs|features|embeddings|weights|grads|gradients|acc|accuracy|"
    r"correct|found_inf|inf_found|is_finite|nan_mask|tokens|ids|indices)$"
)
NON_TENSOR_ANNOTATIONS = {
    "int",
    "float",
    "bool",
    "str",
    "dict",
    "list",
    "tuple",
    "Optional[int]",
    "Optional[float]",
    "Optional[str]",
    "Optional[bool]",
}
NON_TENSOR_PARAMS = re.compile(
    r"^(self|cls|step|steps|epoch|epochs|i|j|k|idx|\w+_idx|\w+_index|batch_size|num_\w+|n_\w+|args|kwargs|"
    r"config|cfg|opt|optimizer|optimizers|scheduler|lr|\w+_lr|verbose|name|prefix|mode|state|trainer|"
    r"\w+_step|global_step|closure|model|module|dataloader_idx|tag|device|dtype|seed|rank|world_size|"
    r"key|keys|path|msg|message|description|desc|fmt|title|label_names|exc|e|err|error|callback|fn|func|"
    r"\w+_name|\w+_names|\w+_dir|\w+_path|\w+_fn|\w+_func|\w+_config|\w+_cfg|\w+_kwargs|\w+_args)$"
)


# Helpers that move data to the accelerator: `state.device.tensor_to_device(t)`, `send_to_device(b, d)`.
TO_DEVICE_CALL = re.compile(
    r"(^|_)to_(device|xla|tpu|accelerator)$|^(move|send|put)_(\w+_)?to_(device|xla|tpu)$|^xla_move"
)


# Tensor methods and torch factories whose positional arguments are sizes (`x.view(B, H // w, -1)`,
# `torch.zeros((1, H, W, 1))`): Python ints, or tuples of them.
SIZE_METHODS = {"view", "reshape", "expand", "new_zeros", "new_ones", "new_empty"}
SIZE_FACTORIES = {"torch.zeros", "torch.ones", "torch.empty", "torch.rand", "torch.randn"}


def _size_operands(expr: ast.expr) -> set[str]:
    """The names a size argument computes with: `H // w` -> {H, w}, `(1, H, W, 1)` -> {H, W}."""
    if isinstance(expr, ast.Name):
        return {expr.id}
    if isinstance(expr, ast.BinOp):
        return _size_operands(expr.left) | _size_operands(expr.right)
    if isinstance(expr, (ast.Tuple, ast.List)):
        return {n for e in expr.elts for n in _size_operands(e)}
    return set()


def _computed(ctx: File, expr: ast.expr, depth: int = 0) -> bool:
    """`expr` is the result of an operation (`x.amax(0)[:2]`, through the names it is assigned to),
    not a parameter handed on or unpacked (`H, W = x_size`)."""
    if depth > 8:
        return False
    if isinstance(expr, ast.Name):
        return any(_computed(ctx, v, depth + 1) for v in ctx.reaching_values(expr))
    if isinstance(expr, (ast.Subscript, ast.Attribute)):
        return _computed(ctx, expr.value, depth + 1)
    if isinstance(expr, ast.BinOp):
        return _computed(ctx, expr.left, depth + 1) or _computed(ctx, expr.right, depth + 1)
    if isinstance(expr, (ast.Tuple, ast.List)):
        return any(_computed(ctx, e, depth + 1) for e in expr.elts)
    return isinstance(expr, ast.Call)


def combine(*kinds: Kind) -> Kind:
    return max(kinds, default=Kind.NOT_TENSOR)


_NOT_TENSOR_NODES = (ast.Constant, ast.JoinedStr, ast.Dict, ast.DictComp, ast.Lambda, ast.Set, ast.SetComp)


class TensorInference:
    """Memoised `kind(expr)` for one file."""

    def __init__(self, ctx: File) -> None:
        self.ctx = ctx
        self.cache: dict[ast.AST, Kind] = {}
        # answers that went through a cut cycle are exact only within the query that computed
        # them: kept until it ends (so each query is linear), then dropped
        self.provisional: dict[ast.AST, Kind] = {}
        self.active: set[ast.AST] = set()
        self.cycles = 0  # recursion-guard hits
        self.size_names: dict[ast.AST, frozenset[str]] = {}  # function -> names it computes sizes with

    def kind(self, node: ast.expr | None) -> Kind:
        if node is None:
            return Kind.UNKNOWN
        if self.ctx.jax_only:
            return Kind.NOT_TENSOR  # JAX arrays: the JAX rules judge them, not the torch ones
        cached = self.cache.get(node)
        if cached is None:
            cached = self.provisional.get(node)
        if cached is not None:
            return cached
        if node in self.active or len(self.active) > 60:  # `x = x + 1`, or a chain too deep to follow
            self.cycles += 1
            return Kind.UNKNOWN
        self.active.add(node)
        cycles = self.cycles
        try:
            result = self._kind(node)
        finally:
            self.active.discard(node)
        if self.cycles == cycles or not self.active:
            self.cache[node] = result  # exact: no partial answer from a cycle went into it
        else:
            self.provisional[node] = result
        if not self.active:
            self.provisional.clear()
        return result

    # -- expressions ------------------------------------------------------------------------
    def _kind(self, node: ast.expr) -> Kind:
        if isinstance(node, _NOT_TENSOR_NODES):
            return Kind.NOT_TENSOR
        if isinstance(node, ast.Name):
            return self._name(node)
        if isinstance(node, ast.Attribute):
            return self._attribute(node)
        if isinstance(node, ast.Call):
            return self._call(node)
        if isinstance(node, ast.Subscript):
            return self._subscript(node)
        if isinstance(node, ast.BinOp):
            return combine(self.kind(node.left), self.kind(node.right))
        if isinstance(node, ast.UnaryOp):
            if isinstance(node.op, ast.Not):
                return self._truth(node.operand)
            return self.kind(node.operand)
        if isinstance(node, ast.Compare):
            if all(isinstance(op, (ast.Is, ast.IsNot, ast.In, ast.NotIn)) for op in node.ops):
                return Kind.NOT_TENSOR
            if any(_is_none(o) for o in (node.left, *node.comparators)):
                return Kind.NOT_TENSOR  # `t == None` is a Python bool (a tensor is never equal to None)
            return combine(self.kind(node.left), *(self.kind(c) for c in node.comparators))
        if isinstance(node, ast.BoolOp):
            # `a and b` evaluates truthiness of a; the value is a or b.
            return combine(*(self.kind(v) for v in node.values))
        if isinstance(node, ast.IfExp):
            return combine(self.kind(node.body), self.kind(node.orelse))
        if isinstance(node, (ast.Tuple, ast.List)):
            return (
                combine(*(self.kind(e.value if isinstance(e, ast.Starred) else e) for e in node.elts))
                if node.elts
                else Kind.NOT_TENSOR
            )
        if isinstance(node, (ast.ListComp, ast.GeneratorExp)):
            return self.kind(node.elt)
        if isinstance(node, (ast.Await, ast.NamedExpr, ast.Starred)):
            return self.kind(node.value)
        return Kind.UNKNOWN

    def _truth(self, node: ast.expr) -> Kind:
        kind = self.kind(node)
        return kind if kind.on_device or kind == Kind.CPU else Kind.NOT_TENSOR

    def _name(self, node: ast.Name) -> Kind:
        name = node.id
        if self.narrowed_to_host(node):
            return Kind.NOT_TENSOR
        values = self.ctx.reaching_values(node)
        if values:
            # `flag = not t` stores a Python bool: the sync happened at the `not`, not where `flag` is read
            return combine(
                *(
                    Kind.NOT_TENSOR if isinstance(v, ast.UnaryOp) and isinstance(v.op, ast.Not) else self.kind(v)
                    for v in values
                )
            )
        iterables = self.ctx.loop_iterables(node)
        if iterables:
            return combine(*(self._element_kind(it) for it in iterables))
        binding = self.ctx.index.imports.get(name)
        if binding is not None or name in PY_BUILTINS_NOT_TENSOR:
            return Kind.NOT_TENSOR
        param = self.ctx.parameter(node)
        if param is not None:
            return self._parameter(param)
        if TENSOR_NAME.match(name):
            return Kind.TENSOR
        return Kind.UNKNOWN

    def narrowed_to_host(self, node: ast.Name) -> bool:
        """`node` is read where `isinstance(node, np.ndarray)` (or a Python scalar or container
        type) holds: in that `if`'s body or that conditional expression's value."""
        child = node
        for anc in self.ctx.index.ancestors(node):
            if isinstance(anc, (*FUNCTIONS, ast.Lambda)):
                return False
            if isinstance(anc, (ast.If, ast.IfExp)) and self.ctx.index.field_of(child) == "body":
                tests = (
                    anc.test.values
                    if isinstance(anc.test, ast.BoolOp) and isinstance(anc.test.op, ast.And)
                    else [anc.test]
                )
                if any(self._isinstance_host(t, node.id) for t in tests):
                    return True
                if any(
                    isinstance(t, ast.UnaryOp) and isinstance(t.op, ast.Not) and self._tensor_check(t.operand, node.id)
                    for t in tests
                ):
                    return True  # `if not torch.is_tensor(t): n = int(t)`
            if (
                isinstance(anc, (ast.If, ast.IfExp))
                and self.ctx.index.field_of(child) == "orelse"
                and self._tensor_check(anc.test, node.id)
            ):
                return True  # `if isinstance(t, torch.Tensor): ... else: n = int(t)`
            child = anc
        return False

    def _tensor_check(self, test: ast.expr, name: str) -> bool:
        """`isinstance(name, torch.Tensor)` (or a tuple of types with it) or `torch.is_tensor(name)`: false
        only when `name` is no tensor."""
        if not (
            isinstance(test, ast.Call) and test.args and isinstance(test.args[0], ast.Name) and test.args[0].id == name
        ):
            return False
        qualified = self.ctx.qualified_name(test.func) or ""
        if qualified == "torch.is_tensor":
            return len(test.args) == 1
        if qualified == "isinstance" and len(test.args) == 2:
            types = test.args[1].elts if isinstance(test.args[1], ast.Tuple) else [test.args[1]]
            return any(last_part(self.ctx.qualified_name(t) or "") == "Tensor" for t in types)
        return False

    def _isinstance_host(self, test: ast.expr, name: str) -> bool:
        if not (
            isinstance(test, ast.Call)
            and dotted_name(test.func) == "isinstance"
            and len(test.args) == 2
            and isinstance(test.args[0], ast.Name)
            and test.args[0].id == name
        ):
            return False
        types = test.args[1].elts if isinstance(test.args[1], ast.Tuple) else [test.args[1]]
        qualified = [self.ctx.qualified_name(t) or "" for t in types]
        return bool(qualified) and all(q.split(".")[0] in ("numpy", "np") or q in HOST_TYPES for q in qualified)

    def _parameter(self, param: ast.arg) -> Kind:
        name = param.arg
        if NON_TENSOR_PARAMS.match(name):
            return Kind.NOT_TENSOR
        if param.annotation is not None:
            annotation = ast.unparse(param.annotation)
            if "Tensor" in annotation:
                return Kind.TENSOR
            if annotation in NON_TENSOR_ANNOTATIONS or _host_annotation(param.annotation):
                return Kind.NOT_TENSOR
        func = self.ctx.index.parent(self.ctx.index.parent(param))
        default = param_default(func, param) if func is not None else None
        if default is not None and not is_constant(default, None):
            return Kind.NOT_TENSOR  # a literal/config default: a hyper-parameter, not data
        if isinstance(func, FUNCTIONS) and self._used_as_size(func, param):
            # `def window_reverse(windows, w, H, W): windows.view(B, H // w, W // w, ...)`, or
            # `H, W = x_size` then `x.view(B, H, W, C)`: a size, unless a caller evidently passes a tensor
            passed = self._passed(param)
            if passed in (Kind.DEVICE, Kind.CPU) or (
                passed == Kind.TENSOR and any(_computed(self.ctx, v) for v in self.ctx.arguments_for(param) if v)
            ):
                return passed
            return Kind.NOT_TENSOR
        if isinstance(func, FUNCTIONS) and is_named_step(self.ctx, func) and self.ctx.is_step_function(func):
            return Kind.TENSOR  # forward(self, x), training_step(self, batch, ...): data
        passed = self._passed(param) if isinstance(func, FUNCTIONS) else Kind.UNKNOWN
        if passed == Kind.UNKNOWN and func in self.ctx.cached(CompiledRegions).roots:
            # `step = torch.compile(f); step(x, 3)`
            values = compiled_arguments(self.ctx, param)
            passed = (combine(*(self.ctx.tensor_kind(v) for v in values)) if values else None) or Kind.UNKNOWN
        if passed >= Kind.CPU or passed == Kind.NOT_TENSOR:
            return passed  # what the module's own callers pass
        host = self._host_everywhere(func, param) if isinstance(func, FUNCTIONS) else None
        if host is not None:
            return host  # every call in the project passes a host value (`summarize(out.cpu())`)
        return Kind.TENSOR if TENSOR_NAME.match(name) else Kind.UNKNOWN

    def _used_as_size(self, func: ast.FunctionDef | ast.AsyncFunctionDef, param: ast.arg) -> bool:
        """`func` computes a size argument of a reshape or a factory (`SIZE_METHODS`,
        `SIZE_FACTORIES`) with the parameter, or with a name it unpacks the parameter into."""
        sizes = self.size_names.get(func)
        if sizes is None:
            sizes = self.size_names[func] = self._size_names(func)
        if param.arg in sizes:
            return True
        return any(
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Name)
            and node.value.id == param.arg
            and any(
                isinstance(t, ast.Tuple) and {n.id for n in ast.walk(t) if isinstance(n, ast.Name)} & sizes
                for t in node.targets
            )
            for node in func.body
        )

    def _size_names(self, func: ast.AST) -> frozenset[str]:
        found: set[str] = set()
        for call in self.ctx.calls_within(func):
            if method_name(call) in SIZE_METHODS or self.ctx.qualified_name(call.func) in SIZE_FACTORIES:
                for arg in positional(call):
                    found |= _size_operands(arg)
        return frozenset(found)

    def _host_everywhere(self, func: ast.FunctionDef | ast.AsyncFunctionDef, param: ast.arg) -> Kind | None:
        """CPU (a host tensor) or NOT_TENSOR (a Python value) when every call of `func` the project
        makes passes a host value for `param` (`ProjectFacts.host_params`); None otherwise."""
        # what `**kwargs` collects: every keyword of every call
        keys = ["k:**"] if param is func.args.kwarg else None
        kind = passed_by_project(self.ctx, func, param, ("cpu", "py"), keys)
        return {"cpu": Kind.CPU, "py": Kind.NOT_TENSOR}.get(kind) if kind else None

    def _passed(self, param: ast.arg) -> Kind:
        """The kind of what this module's calls pass for `param`; UNKNOWN without calls."""
        values = self.ctx.arguments_for(param)
        if any(v is None for v in values):
            return Kind.UNKNOWN  # a default or *args: can't tell
        return combine(*(self.kind(v) for v in values)) if values else Kind.UNKNOWN

    def _element_kind(self, iterable: ast.expr, depth: int = 0) -> Kind:
        """Kind of the loop variable of `for x in iterable`."""
        while isinstance(iterable, ast.Call) and last_part(dotted_name(iterable.func)) in ELEMENT_WRAPPERS:
            if not iterable.args:
                return Kind.UNKNOWN
            iterable = iterable.args[-1 if last_part(dotted_name(iterable.func)) == "zip" else 0]
        if isinstance(iterable, ast.Starred):
            return Kind.UNKNOWN
        collected = self._keywords_collected(iterable)
        if collected is not None:
            return collected
        if isinstance(iterable, ast.Call):
            name = last_part(dotted_name(iterable.func))
            if name in ("MpDeviceLoader", "per_device_loader"):
                return Kind.DEVICE
            if name == "DataLoader":
                return Kind.CPU  # a plain DataLoader yields host tensors
            if name in ("parameters", "named_parameters"):
                return Kind.NOT_TENSOR  # parameters are handled through `.grad`
            if name == "range":
                return Kind.NOT_TENSOR
        if isinstance(iterable, ast.Attribute) and iterable.attr == "param_groups":
            return Kind.NOT_TENSOR  # an optimizer's groups: Python hyper-parameters (and its parameters)
        if dotted_name(iterable):
            for value in self.ctx.assigned_values(iterable):
                if isinstance(value, ast.Call):
                    callee = last_part(dotted_name(value.func))
                    if callee == "DataLoader":
                        return Kind.CPU  # a plain DataLoader yields host tensors
                    if callee in ("MpDeviceLoader", "per_device_loader"):
                        return Kind.DEVICE
        passed = self._passed_iterables(iterable) if depth < 2 else []
        if passed:  # `def evaluate(model, device_loader): for x, y in device_loader:` - what callers pass
            return combine(*(self._element_kind(v, depth + 1) for v in passed))
        kind = self.kind(iterable)
        return kind if kind != Kind.NOT_TENSOR else Kind.UNKNOWN

    def _keywords_collected(self, iterable: ast.expr) -> Kind | None:
        """`for k, v in kwargs.items():` over a `**kwargs` parameter: host values when every call the
        project makes passes only host keywords (`logger.update(loss=loss.item(), lr=lr)`)."""
        if not (isinstance(iterable, ast.Call) and method_name(iterable) in ("items", "values") and not iterable.args):
            return None
        mapping = receiver(iterable)
        if not isinstance(mapping, ast.Name) or self.ctx.reaching_values(mapping):
            return None
        func = self.ctx.index.enclosing_function(iterable)
        param = func.args.kwarg if isinstance(func, FUNCTIONS) else None
        if func is None or param is None or param.arg != mapping.id:
            return None
        return self._host_everywhere(func, param)

    def _passed_iterables(self, iterable: ast.expr) -> list[ast.expr]:
        """For a parameter that nothing in its function assigns, what every call of its function in
        this module passes for it; [] when a call passes nothing (a default) or there is no call."""
        if not isinstance(iterable, ast.Name) or self.ctx.reaching_values(iterable):
            return []
        param = self.ctx.parameter(iterable)
        values = self.ctx.arguments_for(param) if param is not None else []
        passed = [v for v in values if v is not None]
        return passed if values and len(passed) == len(values) else []

    def _attribute(self, node: ast.Attribute) -> Kind:
        attr = node.attr
        if attr in SHAPE_ATTRIBUTES or (attr.startswith("__") and attr.endswith("__")):
            return Kind.NOT_TENSOR  # shapes and dtypes; `__class__`, `__name__`, `__dict__`
        if attr == "grad":
            return Kind.DEVICE
        base = self.kind(node.value)
        if attr in SAME_KIND_ATTRIBUTES:
            return base
        full = dotted_name(node)
        if full:
            qualified = self.ctx.qualified_name(node)
            if qualified and qualified.split(".")[0] in HOST_MODULES:
                return Kind.NOT_TENSOR
            values = self.ctx.attribute_values(full)
            if values:
                return combine(*(self.kind(v) for v in values))
        if base == Kind.DEVICE:
            return Kind.DEVICE  # `outputs.loss`, `out.logits`
        if TENSOR_NAME.match(attr):
            return Kind.TENSOR if base != Kind.NOT_TENSOR else Kind.UNKNOWN
        return Kind.UNKNOWN

    def _subscript(self, node: ast.Subscript) -> Kind:
        base = self.kind(node.value)
        return base if base != Kind.NOT_TENSOR else Kind.NOT_TENSOR

    def _call(self, node: ast.Call) -> Kind:
        qualified = self.ctx.qualified_name(node.func)
        method = method_name(node)
        if qualified:
            root = qualified.split(".")[0]
            head, _, tail = qualified.rpartition(".")
            if root in HOST_MODULES:
                return Kind.NOT_TENSOR
            if qualified in PY_BUILTINS_NOT_TENSOR:
                return Kind.NOT_TENSOR
            if qualified in ("sum", "max", "min", "abs"):
                return combine(*(self.kind(a) for a in node.args))
            if (
                root == "torch"
                and not qualified.startswith("torch.Tensor")
                and not any(p.startswith("__") and p.endswith("__") for p in head.split("."))
            ):
                # (`torch.__version__.split(".")` is a method of a string, no torch op)
                return self._torch_call(node, qualified, head, tail)
            if qualified in RUNTIME_TENSOR_FUNCTIONS:
                # xlalint.runtime's masked reductions and clipping: tensors on their argument's device
                kinds = [self.kind(a) for a in positional(node)]
                result = combine(*kinds) if kinds else Kind.TENSOR
                return result if result >= Kind.CPU else Kind.TENSOR
            if root == "torch_xla" and tail in XLA_COLLECTIVES:
                kinds = [self.kind(a) for a in node.args]
                return Kind.DEVICE if any(k >= Kind.CPU for k in kinds) or not kinds else Kind.TENSOR
        name = dotted_name(node.func)
        if TO_DEVICE_CALL.search(last_part(name) or method or ""):
            return Kind.DEVICE
        if (
            name
            and MODEL_CALLEE.search(last_part(name))
            and name.count(".") <= 1
            and not PREDICATE.match(last_part(name))
        ):
            return Kind.DEVICE  # `model(x)`, `self.encoder(h)`, `criterion(out, y)`: model outputs
        if name and name.startswith("self.") and name.count(".") == 1 and self._submodule(name):
            return Kind.DEVICE  # `self.quantizer(h)` where `self.quantizer = VectorQuantizer(...)`
        if method is not None:
            result = self._method_call(node, method)
            if result != Kind.NOT_TENSOR or dotted_name(receiver(node)) not in ("self", "cls"):
                return result
        if isinstance(node.func, ast.Name) and self._annotated_scalar(node.func.id, node):
            return Kind.NOT_TENSOR  # `def _is_contiguous(t) -> bool`: it says it returns a Python value
        # `self.residual(x)`, `project(h)`: a function of device tensors most likely returns one
        if any(self.kind(a).on_device for a in positional(node)):
            return Kind.TENSOR
        if isinstance(node.func, ast.Name):
            returned = self._returned_kind(node.func.id, node)
            if returned is not None:
                return returned
        return Kind.UNKNOWN

    def _annotated_scalar(self, name: str, call: ast.Call) -> bool:
        """The plain function `name` of this module (the one the call sees) is annotated to return a
        Python scalar (`-> bool`, `-> int`, `-> float`, `-> str`)."""
        scope: ast.AST = self.ctx.index.scope_of(call)
        while not (functions := self.ctx.functions_in_scope(name, scope)):
            if isinstance(scope, ast.Module):
                return False
            scope = self.ctx.index.scope_of(scope)
        func = functions[-1]
        returns = getattr(func, "returns", None)
        return (
            len(functions) == 1
            and isinstance(func, ast.FunctionDef)
            and returns is not None
            and ast.unparse(returns) in ("bool", "int", "float", "str")
        )

    def _returned_kind(self, name: str, call: ast.Call) -> Kind | None:
        """`def fast_all(t): return t.all()`: a function of this module whose every `return` gives a
        tensor returns one (its returns are judged in its own scope)."""
        values = returned_values(self.ctx, name, call)
        kinds = [self.kind(v) for v in values]
        return combine(*kinds) if kinds and all(k >= Kind.CPU for k in kinds) else None

    def python_value(self, expr: ast.expr, depth: int = 0) -> bool:
        """`expr` is a Python value as computed (`t.tolist()`, `(a.item(), b.item())`), through the
        names it is assigned to; not a list, dict or set display, which the code may fill with
        tensors afterwards (`out = []`, then `out.append(t)`)."""
        if depth > 8 or isinstance(expr, (ast.List, ast.Dict, ast.Set)):
            return False
        if isinstance(expr, ast.Tuple):
            return all(self.python_value(e, depth + 1) for e in expr.elts)
        if isinstance(expr, ast.Name):
            values = self.ctx.reaching_values(expr)
            return bool(values) and all(self.python_value(v, depth + 1) for v in values)
        return self.kind(expr) == Kind.NOT_TENSOR

    def _submodule(self, name: str) -> bool:
        """`self.<name>` is assigned a module instance (`nn.Linear(...)`, `Encoder(...)`) in the class."""
        for value in self.ctx.attribute_values(name):
            if isinstance(value, ast.Call):
                callee = last_part(dotted_name(value.func))
                if callee[:1].isupper() or (self.ctx.qualified_name(value.func) or "").startswith("torch.nn."):
                    return True
        return False

    def _torch_call(self, node: ast.Call, qualified: str, head: str, tail: str) -> Kind:
        if qualified in WRAPS_ITS_ARGUMENT:  # `Variable(t)`, `nn.Parameter(t)`: the tensor itself
            return self.kind(node.args[0]) if node.args else Kind.TENSOR
        if (
            tail in TORCH_NOT_TENSOR
            or TORCH_QUERY.match(tail)
            or qualified.startswith(TORCH_NOT_TENSOR_PREFIXES)
            and not qualified.startswith("torch.nn.utils.clip_grad")
        ):
            return Kind.NOT_TENSOR
        if qualified.startswith("torch.nn.utils.clip_grad"):
            return Kind.DEVICE  # the total norm lives on the parameters' device
        if head == "torch" and tail[:1].isupper():
            return Kind.NOT_TENSOR  # torch.Size, torch.Generator, dtype classes...
        if head.startswith("torch.nn") and head != "torch.nn.functional":
            return Kind.UNKNOWN  # nn.Linear(...) builds a module
        device = keyword_value(node, "device")
        if tail in FACTORIES:
            if device is not None:
                return Kind.CPU if _names_cpu(device) else Kind.DEVICE
            return Kind.CPU
        if tail in LIKE_FACTORIES:
            if device is not None:
                return Kind.CPU if _names_cpu(device) else Kind.DEVICE
            args = positional(node)
            return self.kind(args[0]) if args else Kind.TENSOR
        kinds = [self.kind(a) for a in node.args]
        kinds += [self.kind(k.value) for k in node.keywords if k.arg not in ("dim", "dtype")]
        result = combine(*kinds) if kinds else Kind.TENSOR
        return result if result >= Kind.CPU else Kind.TENSOR

    def _method_call(self, node: ast.Call, method: str) -> Kind:
        recv = receiver(node)
        if method == "values" and not node.args and recv is not None:
            found = self.dict_values(recv)
            if found is not None:
                return found  # `{"box": loss_box}.values()`
            if self.kind(recv) == Kind.DEVICE:
                return Kind.DEVICE  # `model(images, targets).values()`: a detection model's dict of losses
        if method in HOST_METHODS:
            return Kind.NOT_TENSOR
        if method == "cpu":
            return Kind.CPU
        if method in ("cuda", "xla"):
            return Kind.DEVICE
        base = self.kind(recv)
        if base == Kind.NOT_TENSOR:
            return Kind.NOT_TENSOR
        if method == "to":
            device = keyword_value(node, "device")
            targets = [device] if device is not None else positional(node)
            if any(_names_cpu(t) for t in targets):
                return Kind.CPU
            if any(_names_device(t) for t in targets):
                return Kind.DEVICE
            return base
        if MODEL_CALLEE.search(method) and base == Kind.UNKNOWN:
            return Kind.UNKNOWN
        if method in TENSOR_ONLY_METHODS and base == Kind.UNKNOWN:
            return Kind.TENSOR
        return base

    def dict_values(self, expr: ast.expr, depth: int = 0) -> Kind | None:
        """The kind of the values of the dict `expr` holds (`{k: loss_k}`, a comprehension, or a
        name or attribute assigned one); None when no dict literal is in sight."""
        if depth > MAX_DEPTH:
            return None
        if isinstance(expr, ast.Dict):
            return combine(*(self.kind(v) for v in expr.values))
        if isinstance(expr, ast.DictComp):
            return self.kind(expr.value)
        if isinstance(expr, ast.IfExp):
            kinds = [self.dict_values(e, depth + 1) for e in (expr.body, expr.orelse)]
            return combine(*(k if k is not None else self.kind(e) for k, e in zip(kinds, (expr.body, expr.orelse))))
        if isinstance(expr, (ast.Name, ast.Attribute)):
            values = [v for v in self.ctx.assigned_values(expr) if v is not expr]
            kinds = [self.dict_values(v, depth + 1) for v in values]
            if any(k is not None for k in kinds):
                return combine(*(k if k is not None else self.kind(v) for k, v in zip(kinds, values)))
        return None


_HOST_ANNOTATION_NAMES = {
    "int",
    "float",
    "bool",
    "str",
    "bytes",
    "complex",
    "list",
    "tuple",
    "dict",
    "set",
    "frozenset",
    "List",
    "Tuple",
    "Dict",
    "Set",
    "FrozenSet",
    "Optional",
    "Union",
    "Sequence",
    "Mapping",
    "Iterable",
    "Literal",
    "None",
    "typing",
    "collections",
    "abc",
}


def _host_annotation(annotation: ast.expr) -> bool:
    """`list[tuple[int, int]]`, `Optional[Sequence[int]]`, `int | None`: only Python builtin types
    and their containers, so no tensor (string literals inside `Literal[...]` count as values)."""
    names = [
        n.id if isinstance(n, ast.Name) else n.attr
        for n in ast.walk(annotation)
        if isinstance(n, (ast.Name, ast.Attribute))
    ]
    if isinstance(annotation, ast.Constant):
        return False  # a string annotation: not parsed here
    return bool(names) and all(name in _HOST_ANNOTATION_NAMES for name in names)


def passed_by_project(
    ctx: File, func: ast.AST, param: ast.arg, kinds: tuple[str, ...], keys: list[str] | None = None
) -> str | None:
    """The first of `kinds` the project's facts about calls of `func` hold for `param`
    (`ProjectFacts.host_params`: "cpu"/"py" every call passes a host value, "inv" every call the
    same value, "dev" some call a device value of seen origin), the argument named by keyword or
    by its position in a call (`keys`, when given); None for none of them."""
    facts = ctx.project.host_params
    if not facts:
        return None
    if keys is None:
        position = ctx.call_position(cast("ast.FunctionDef", func), param)
        keys = [f"k:{param.arg}", *([str(position)] if position is not None else [])]
    name = qualname(ctx.index, func)
    return next((kind for kind in kinds if any((name, key, kind) in facts for key in keys)), None)


def names_cpu(node: ast.expr) -> bool:
    """`"cpu"`, `torch.device("cpu")`, `cpu_device`: the host."""
    if string_value(node) == "cpu":
        return True
    if isinstance(node, ast.Call) and last_part(dotted_name(node.func)) == "device" and node.args:
        return string_value(node.args[0]) == "cpu"
    return dotted_name(node) in ("cpu", "cpu_device", "torch.device.cpu")


_names_cpu = names_cpu


def _names_device(node: ast.expr) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str) and node.value != "cpu"
    name = dotted_name(node) or (dotted_name(node.func) if isinstance(node, ast.Call) else None) or ""
    return bool(re.search(r"device|dev$|cuda|xla|tpu|gpu|accelerator|rank", name, re.I))


# -- evidence: a torch tensor by what it computes (the JAX twins: jax_tracing.is_boolean_mask, ...) ---------

_MASK_NAME = re.compile(r"mask", re.I)
_MEMBERSHIP = (ast.Is, ast.IsNot, ast.In, ast.NotIn)


def _is_none(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def _is_text(node: ast.expr) -> bool:
    return isinstance(node, ast.JoinedStr) or isinstance(node, ast.Constant) and isinstance(node.value, (str, bytes))


def returned_values(ctx: File, name: str, call: ast.Call) -> list[ast.expr]:
    """What the plain function `name`, defined in the module around `call`, returns: every
    `return`'s value, or nothing when one returns no value or the function is redefined, async,
    decorated or a generator (then its call's value is not its body's)."""
    scope: ast.AST = ctx.index.scope_of(call)
    while not (functions := ctx.functions_in_scope(name, scope)):
        if isinstance(scope, ast.Module):
            return []
        scope = ctx.index.scope_of(scope)
    func = functions[-1]
    if len(functions) > 1 or not isinstance(func, ast.FunctionDef) or func.decorator_list:
        return []
    values = [r.value for r in own_returns(func)]
    return [] if any(v is None for v in values) else [v for v in values if v is not None]


def evident_device_tensor(ctx: File, expr: ast.expr, depth: int = 0) -> bool:
    """`expr` is a device tensor by what it computes, not only by its name.

    A bare parameter or loop variable (`if cache:`, `if dur > 0:`) is not enough: in a truth test
    such names are usually Optional/None checks, lists or Python numbers. A torch function, a
    tensor method or an elementwise comparison involving an evident tensor is.
    """
    if depth > MAX_DEPTH or not ctx.on_device(expr):
        return False
    if isinstance(expr, ast.Name):
        values = ctx.reaching_values(expr)
        return any(evident_device_tensor(ctx, v, depth + 1) for v in values)
    if isinstance(expr, ast.Attribute):
        values = ctx.assigned_values(expr)
        return any(evident_device_tensor(ctx, v, depth + 1) for v in values)
    if isinstance(expr, ast.Subscript):
        return evident_device_tensor(ctx, expr.value, depth + 1)
    if isinstance(expr, ast.Compare):
        operands = [expr.left, *expr.comparators]
        if any(_is_text(o) for o in operands):
            return False
        return any(evident_device_tensor(ctx, o, depth + 1) for o in operands)
    if isinstance(expr, ast.BinOp):
        return any(evident_device_tensor(ctx, o, depth + 1) for o in (expr.left, expr.right))
    if isinstance(expr, ast.UnaryOp):
        return evident_device_tensor(ctx, expr.operand, depth + 1)
    if isinstance(expr, ast.Call):
        qualified = ctx.qualified_name(expr.func) or ""
        if (
            qualified.startswith("torch.")
            and not qualified.startswith("torch.Tensor")
            or qualified in RUNTIME_TENSOR_FUNCTIONS
        ):
            return True  # a torch (or xlalint.runtime) function that returns a tensor (kind already says which)
        if isinstance(expr.func, ast.Name):
            values = returned_values(ctx, expr.func.id, expr)
            if values and all(evident_device_tensor(ctx, v, depth + 1) for v in values):
                return True  # `fast_all(mask)` where `def fast_all(t): return t.all()`
        method = method_name(expr)
        recv = receiver(expr)
        if method in TENSOR_REDUCTIONS and recv is not None and ctx.on_device(recv):
            return True
        return method is not None and recv is not None and evident_device_tensor(ctx, recv, depth + 1)
    return False


def holds_device_tensors(ctx: File, expr: ast.expr) -> bool:
    """`expr` is a device tensor, or a dict whose values are (`{"loss": loss}`, a name assigned a
    dict comprehension of them): what a logger's `update(**losses)` or `log(metrics)` is handed."""
    if ctx.on_device(expr):
        return True
    kind = ctx.cached(TensorInference).dict_values(expr)
    return kind is not None and kind.on_device


def is_torch(ctx: File, call: ast.Call, names: set[str]) -> str | None:
    qualified = ctx.qualified_name(call.func) or ""
    head, _, tail = qualified.rpartition(".")
    if head == "torch" and tail in names:
        return tail
    return None


def is_bool_mask(ctx: File, expr: ast.expr, depth: int = 0) -> bool:
    """`expr` is evidently a boolean device tensor: a comparison of tensors, `~m`, `m & n`,
    `torch.isnan(x)`, `.bool()`, `dtype=torch.bool`, a name assigned from one of those, or a tensor
    named like a mask that nothing shows to hold integer indices (see `integer_index`)."""
    if depth > MAX_DEPTH or not ctx.on_device(expr):
        return False
    if isinstance(expr, ast.Compare):
        return not any(isinstance(op, _MEMBERSHIP) for op in expr.ops)
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.Invert):
        return is_bool_mask(ctx, expr.operand, depth + 1) or _mask_named(ctx, expr.operand)
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, (ast.BitAnd, ast.BitOr, ast.BitXor)):
        return any(is_bool_mask(ctx, side, depth + 1) or _mask_named(ctx, side) for side in (expr.left, expr.right))
    if isinstance(expr, ast.Call):
        if is_torch(ctx, expr, BOOL_FUNCTIONS):
            return True
        method = method_name(expr)
        if method in BOOL_METHODS and not is_torch(ctx, expr, BOOL_FUNCTIONS | {"bool"}):
            return True
        if method in ("to", "type") and any(
            _names_dtype(ctx, a, {"bool"}) for a in (*expr.args, *(k.value for k in expr.keywords))
        ):
            return True
        if _names_dtype(ctx, keyword_value(expr, "dtype"), {"bool"}):
            return True  # `torch.zeros(n, dtype=torch.bool, device=d)`, `torch.ones_like(x, dtype=torch.bool)`
        if method in ("any", "all") and (expr.args or expr.keywords) and ctx.on_device(receiver(expr)):
            return True  # a reduction over a dimension: still a mask
        if is_torch(ctx, expr, {"any", "all"}) and (len(expr.args) > 1 or keyword(expr, "dim") is not None):
            return True  # `torch.all(x == 0, dim=-1)`
        return False
    if isinstance(expr, ast.Name):
        values = ctx.reaching_values(expr)
        if values:
            return all(is_bool_mask(ctx, v, depth + 1) for v in values) or _mask_named(ctx, expr)
        return _mask_named(ctx, expr)
    if isinstance(expr, ast.Attribute):
        return _mask_named(ctx, expr)
    return False


def _mask_named(ctx: File, expr: ast.expr) -> bool:
    """Named like a mask, and nothing in how it was built says it holds integer indices (a name is
    no evidence of a dtype: `keep_mask = logits.topk(k).indices` is a gather of static size)."""
    name = dotted_name(expr) or ""
    return (
        bool(name)
        and bool(_MASK_NAME.search(last_part(name)))
        and ctx.on_device(expr)
        and "attention_mask" not in name
        and "padding_mask" not in name
        and not integer_index(ctx, expr)
    )


def integer_index(ctx: File, expr: ast.expr | None, depth: int = 0) -> bool:
    """`expr` evidently holds integer indices, by how it was built: `argmax`, `arange`, `randperm`,
    `nonzero` (a tensor, or its `as_tuple=True` tuple), one-argument `torch.where(c)`,
    `x.topk(k).indices`, `x.max(1)[1]`, `.long()`, `dtype=torch.long`, or a name, attribute or
    parameter (what this module's calls pass) bound to one. Indexing with it gathers: a static size."""
    if expr is None or depth > MAX_DEPTH:
        return False
    if isinstance(expr, ast.Call):
        if is_torch(ctx, expr, INDEX_FUNCTIONS):
            return True
        if is_torch(ctx, expr, {"where"}) and len(expr.args) == 1 and not expr.keywords:
            return True  # `torch.where(c)`: the tuple of `c.nonzero(as_tuple=True)`
        method = method_name(expr)
        if method in INDEX_METHODS and (method not in ("long", "int") or not expr.args):
            return True
        dtypes = [keyword_value(expr, "dtype")]
        if method in ("to", "type"):
            dtypes += positional(expr)
        if any(_names_dtype(ctx, d, INTEGER_DTYPES) for d in dtypes):
            return True
        if is_torch(ctx, expr, {"tensor", "as_tensor", "LongTensor"}) and expr.args:
            return _int_literals(expr.args[0])
        return False
    if isinstance(expr, ast.Attribute):
        if expr.attr == "indices" and _indexed_result(expr.value):
            return True
        values = ctx.attribute_values(dotted_name(expr) or "") if dotted_name(expr) else []
        return any(integer_index(ctx, v, depth + 1) for v in values)
    if isinstance(expr, ast.Subscript):
        index = expr.slice
        if _indexed_result(expr.value) and isinstance(index, ast.Constant) and index.value == 1:
            return True  # `x.max(dim=1)[1]`, `x.topk(k)[1]`
        return integer_index(ctx, expr.value, depth + 1)  # `perm[:k]`, `nz[0]`
    if isinstance(expr, ast.Name):
        values = ctx.reaching_values(expr)
        if values:
            return any(integer_index(ctx, v, depth + 1) for v in values)
        param = ctx.parameter(expr)
        passed = ctx.arguments_for(param) if param is not None else []
        return any(integer_index(ctx, v, depth + 1) for v in passed if v is not None)
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod)):
        sides = (expr.left, expr.right)
        return any(integer_index(ctx, s, depth + 1) for s in sides) and all(
            integer_index(ctx, s, depth + 1) or (isinstance(s, ast.Constant) and type(s.value) is int) for s in sides
        )  # `idx + 1`, `rows * width + cols`
    if isinstance(expr, (ast.Tuple, ast.List)):
        return bool(expr.elts) and all(integer_index(ctx, e, depth + 1) for e in expr.elts)
    if isinstance(expr, ast.IfExp):
        return integer_index(ctx, expr.body, depth + 1) or integer_index(ctx, expr.orelse, depth + 1)
    return False


def _indexed_result(expr: ast.expr) -> bool:
    """`x.topk(k)`, `torch.sort(x)`, `x.max(dim=1)`: a call with a `(values, indices)` result (for
    `max`/`min`/`median`, only with a dimension)."""
    if not isinstance(expr, ast.Call):
        return False
    name = method_name(expr) or last_part(dotted_name(expr.func))
    if name not in INDEXED_RESULTS:
        return False
    if name in ("max", "min", "median"):
        own = 0 if isinstance(expr.func, ast.Attribute) and dotted_name(expr.func.value) != "torch" else 1
        return len(expr.args) > own or keyword(expr, "dim") is not None
    return True


def _int_literals(node: ast.expr) -> bool:
    """`[0, 2, 5]`: a literal list (or tuple) of Python ints."""
    return (
        isinstance(node, (ast.List, ast.Tuple))
        and bool(node.elts)
        and all(isinstance(e, ast.Constant) and type(e.value) is int for e in node.elts)
    )


def _names_dtype(ctx: File, node: ast.expr | None, names: set[str]) -> bool:
    """`torch.long`, `th.int64`, `torch.LongTensor` (for `.type(...)`): a torch dtype among `names`;
    the Python name `bool` counts as `torch.bool`."""
    if node is None:
        return False
    if isinstance(node, ast.Name) and node.id == "bool" and "bool" in names:
        return True
    qualified = ctx.qualified_name(node) or ""
    head, _, tail = qualified.rpartition(".")
    return head == "torch" and (tail in names or tail.removesuffix("Tensor").lower() in names)


def elementwise_of(ctx: File, mask: ast.expr, base: ast.expr, depth: int = 0) -> bool:
    """`mask` is computed elementwise from the tensor `base` (and scalars), so it has exactly
    `base`'s shape: `x > 0`, `~torch.isnan(x)`, `(x > 0) & (x < 1)`, or a name bound to one. The `x`
    in the mask must be the same binding as `base`, not the same spelling: after
    `m = h > 0; h = h.repeat(3, 1)`, `m` has the old `h`'s shape."""
    return _elementwise(ctx, mask, base, depth) == "base"


def _elementwise(ctx: File, expr: ast.expr, base: ast.expr, depth: int) -> str | None:
    """ "base" (shaped like base), "scalar" (a Python number), or None (anything else)."""
    if depth > MAX_DEPTH:
        return None
    if isinstance(expr, ast.Name) and isinstance(base, ast.Name) and expr.id == base.id:
        return "base" if ctx.same_binding(expr, base) else None
    if not isinstance(base, ast.Name) and ctx.code(expr) == ctx.code(base) and depth == 0:
        return "base"  # `self.h[self.h > 0]`: written in the index itself, read at the same time
    if isinstance(expr, ast.Constant) and type(expr.value) in (int, float):
        return "scalar"
    if isinstance(expr, ast.UnaryOp):
        if isinstance(expr.op, ast.Not):
            return None
        return _elementwise(ctx, expr.operand, base, depth + 1)
    if isinstance(expr, ast.Name):
        values = ctx.reaching_values(expr)
        if len(values) == 1:
            return _elementwise(ctx, values[0], base, depth + 1)
        if not values and ctx.tensor_kind(expr) == Kind.NOT_TENSOR:
            return "scalar"
        return None
    if isinstance(expr, ast.Attribute):
        values = ctx.attribute_values(dotted_name(expr) or "")
        if values and all(ctx.tensor_kind(v) == Kind.NOT_TENSOR for v in values):
            return "scalar"  # `self.threshold = 0.5` somewhere in the file
        return None
    if isinstance(expr, ast.Compare):
        if any(isinstance(op, _MEMBERSHIP) for op in expr.ops):
            return None
        return _shaped_like_parts([_elementwise(ctx, e, base, depth + 1) for e in (expr.left, *expr.comparators)])
    if isinstance(expr, ast.BinOp):
        if isinstance(expr.op, ast.MatMult):
            return None
        return _shaped_like_parts(
            [_elementwise(ctx, expr.left, base, depth + 1), _elementwise(ctx, expr.right, base, depth + 1)]
        )
    if isinstance(expr, ast.Call):
        if expr.keywords or any(isinstance(a, ast.Starred) for a in expr.args):
            return None
        func = is_torch(ctx, expr, ELEMENTWISE_FUNCTIONS | {"logical_and", "logical_or", "logical_xor"})
        if func:
            return _shaped_like_parts([_elementwise(ctx, a, base, depth + 1) for a in expr.args])
        method, recv = method_name(expr), receiver(expr)
        if recv is not None and method in ELEMENTWISE_METHODS and not dotted_name(expr.func) == f"torch.{method}":
            return _shaped_like_parts(
                [
                    _elementwise(ctx, recv, base, depth + 1),
                    *(_elementwise(ctx, a, base, depth + 1) for a in expr.args),
                ]
            )
    return None


def _shaped_like_parts(parts: list[str | None]) -> str | None:
    if any(p is None for p in parts):
        return None
    return "base" if "base" in parts else "scalar"
