"""Cases beyond the rule examples: call-site judgement of helpers, per-call functions, evidence."""

from xlalint.testing import lint_code
from xlalint.rules.control_flow.python_value_from_tensors import PythonValueFromTensors
from xlalint.rules.control_flow.tensor_condition import TensorCondition
from xlalint.rules.dynamic_shapes.boolean_mask_assign import BooleanMaskAssign
from xlalint.rules.dynamic_shapes.data_dependent_shape_op import DataDependentShapeOp
from xlalint.rules.varying_shapes.train_loader_without_drop_last import TrainLoaderWithoutDropLast


def codes(src, rules):
    return [(d.code, d.location.row) for d in lint_code(src, rules)]


def test_helper_called_only_off_xla_is_not_reported():
    src = """
class Trainer:
    def train_step(self, batch):
        loss = self.model(batch)
        gn = torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        if not self.tpu:
            self._check_norms(gn)
        return loss

    def _check_norms(self, gn):
        if not torch.isfinite(gn).all():
            raise FloatingPointError("non-finite grad norm")
"""
    assert codes(src, [TensorCondition]) == []


def test_helper_called_on_xla_is_reported():
    src = """
class Trainer:
    def train_step(self, batch):
        loss = self.model(batch)
        gn = torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self._check_norms(gn)
        return loss

    def _check_norms(self, gn):
        if not torch.isfinite(gn).all():
            raise FloatingPointError("non-finite grad norm")
"""
    assert codes(src, [TensorCondition]) == [("XLA201", 10)]


def test_metric_input_validation_runs_per_call():
    src = """
def _binary_tensor_validation(preds, target):
    values = torch.unique(target)
    if torch.any((values != 0) & (values != 1)):
        raise ValueError("binary targets expected")
"""
    assert codes(src, [TensorCondition, DataDependentShapeOp]) == [("XLA301", 3), ("XLA201", 4)]


def test_loop_variables_and_string_comparisons_are_not_tensor_conditions():
    src = """
def forward(self, x, reduction="mean", durations=(1, 2)):
    for dur in durations:
        if dur > 0:
            x = self.layer(x)
    if reduction == "batch":
        x = x.mean(0)
    return x
"""
    assert codes(src, [TensorCondition]) == []


def test_builtin_max_with_a_python_number_has_no_fix():
    src = """
def forward(self, x):
    h = self.encoder(x)
    return h / max(h.norm(), 1e-6)
"""
    assert codes(src, [PythonValueFromTensors]) == []  # a number: not two tensors compared


def test_mask_assign_with_tensor_value_has_no_fix():
    src = """
def forward(self, x, y):
    out = self.layer(x)
    keep = torch.isfinite(y)
    out[keep] = y[keep]
    return out
"""
    found = lint_code(src, [BooleanMaskAssign])
    assert [d.code for d in found] == ["XLA303"] and found[0].fix is None


def test_loader_rule_only_in_xla_files():
    loader = "train_loader = DataLoader(train_set, batch_size=32, shuffle=True)\n"
    assert codes(loader, [TrainLoaderWithoutDropLast]) == []
    assert codes("import torch_xla\n" + loader, [TrainLoaderWithoutDropLast]) == [("XLA311", 2)]
