"""XLA707 host-built-tensor-in-step: the harm (a host-built tensor moved to a device is a copy of
all its data at every call, where a factory given the device copies none of it: shown with
torchax under JAX's transfer guard), the fix (the same tensors, under torch), and what the rule
reports: per-step code only, constants only (not the batch), XLA paths only."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap

import pytest
from xlalint.rules import RULES_BY_CODE

from xlalint.testing import fix_code, lint_code

XLA707 = RULES_BY_CODE["XLA707"]


def _findings(code: str, path: str = "example.py", modules: dict[str, str] | None = None):
    modules = {name: textwrap.dedent(text).lstrip() for name, text in (modules or {}).items()}
    return lint_code(textwrap.dedent(code).lstrip(), [XLA707], path=path, modules=modules)


# -- the harm, under a real lazy-device runtime -------------------------------------------------------

TRANSFERS = textwrap.dedent(
    """
    import sys
    import jax, torch, torchax
    import torchax.ops.mappings as mappings

    torchax.enable_globally()
    N = 4096
    forms = {
        "host": lambda: torch.linspace(-1, 1, N).to("jax"),
        "device": lambda: torch.linspace(-1, 1, N, device="jax"),
    }
    form = forms[sys.argv[1]]
    form()  # warm up: what the first call sets up once
    # torchax turns a CPU torch tensor into a device array with `mappings.t2j`: count what it converts
    converted = []
    to_jax = mappings.t2j
    mappings.t2j = lambda t, *a, **k: converted.append(t.numel()) or to_jax(t, *a, **k)
    for _ in range(3):  # three steps
        form()
    print("converted", converted)
    # and that conversion is a host-to-device transfer of the whole tensor: JAX's guard refuses it
    try:
        with jax.transfer_guard_host_to_device("disallow_explicit"):
            form()
    except Exception as error:
        print("refused", str(error).split("aval=")[1].split(",")[0] if "aval=" in str(error) else error)
    """
)


def _run(which: str) -> tuple[list[int], str]:
    """(the sizes of the CPU tensors torchax converted to device arrays in three calls, the shape of
    the first host-to-device transfer JAX's guard refused in a fourth)."""
    pytest.importorskip("jax")
    pytest.importorskip("torchax")
    done = subprocess.run(
        [sys.executable, "-c", TRANSFERS, which], capture_output=True, text=True, timeout=300, check=False
    )
    converted = re.search(r"^converted \[([\d, ]*)\]$", done.stdout, re.M)
    if done.returncode != 0 or converted is None:
        pytest.skip(f"torchax did not run here: {done.stderr.strip().splitlines()[-1:]}")
    refused = re.search(r"^refused (.*)$", done.stdout, re.M)
    sizes = [int(n) for n in converted.group(1).split(",") if n.strip()]
    return sizes, refused.group(1) if refused else ""


def test_a_host_built_tensor_moved_to_the_device_is_copied_whole_at_every_call():
    sizes, refused = _run("host")
    assert sizes == [4096, 4096, 4096]  # the whole table, once per step
    assert refused == "ShapedArray(float32[4096])"  # a host-to-device transfer of all of it


def test_the_factory_given_the_device_copies_no_host_tensor():
    sizes, refused = _run("device")
    assert sizes == []  # computed from its arguments: no tensor crosses
    assert "4096" not in refused  # (torchax's eager mode may send the scalar arguments)


# -- the fix keeps the tensors -------------------------------------------------------------------------

FACTORIES = [
    "torch.linspace(-1 + w / 2, 1 - w / 2, n)",
    "torch.arange(n)",
    "torch.arange(1, n, 2, dtype=torch.float64)",
    "torch.ones(b, n, 3)",
    "torch.zeros((b, n), dtype=torch.long)",
    "torch.full((n,), 0.25)",
    "torch.eye(n)",
    "torch.logspace(0, 2, n)",
]


@pytest.mark.parametrize("factory", FACTORIES)
def test_the_fix_builds_the_same_tensor(factory):
    torch = pytest.importorskip("torch")
    code = textwrap.dedent(
        f"""
        import torch
        import torch_xla

        class Grid(torch.nn.Module):
            def forward(self, x, device):
                b, n = x.shape[0], x.shape[-1]
                w = 2 / n
                t = {factory}.to(device)
                return t
        """
    )
    fixed = fix_code(code, [XLA707], unsafe=False)
    assert fixed != code and ".to(device)" not in fixed and "device=device" in fixed
    results = []
    for source in (code, fixed):
        namespace: dict = {}
        exec(compile(source.replace("import torch_xla\n", ""), "<example>", "exec"), namespace)
        results.append(namespace["Grid"]().forward(torch.zeros(2, 5), torch.device("cpu")))
    before, after = results
    assert before.dtype == after.dtype and before.shape == after.shape
    assert torch.equal(before, after)


def test_a_move_that_also_casts_and_data_factories_are_reported_without_a_fix():
    code = """
        import torch
        import torch_xla

        class Grid(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.scale = 0.5

            def forward(self, x):
                a = torch.arange(x.shape[-1]).to(x.device, torch.float16)
                b = torch.tensor(self.scale).to(x.device)
                return x * a * b
        """
    found = _findings(code)
    assert [f.location.row for f in found] == [10, 11]
    assert fix_code(textwrap.dedent(code), [XLA707], unsafe=True) == textwrap.dedent(code)


# -- what is reported -----------------------------------------------------------------------------------


def test_a_numpy_table_uploaded_by_a_helper_of_a_loss_is_reported_with_its_chain():
    found = _findings(
        """
        import numpy as np
        import torch
        import torch_xla.core.xla_model as xm

        def gather(table, t, shape):
            out = torch.from_numpy(table).to(device=t.device)[t].float()
            return out.view(-1, *([1] * (len(shape) - 1)))

        class Schedule:
            def __init__(self, steps):
                self.betas = np.linspace(1e-4, 0.02, steps)
                self.alphas = np.cumprod(1.0 - self.betas)

            def training_loss(self, model, x, t):
                noisy = gather(np.sqrt(self.alphas), t, x.shape) * x
                return (model(noisy, t) - x).pow(2).mean()

        def train(model, loader, optimizer, schedule):
            for x, t in loader:
                loss = schedule.training_loss(model, x, t)
                loss.backward()
                xm.optimizer_step(optimizer)
        """
    )
    assert [(f.location.row, f.confidence) for f in found] == [(6, "high")]
    assert "fixed across steps" in found[0].related[-1].message


def test_a_helper_called_through_a_partial_from_another_modules_step_is_reported():
    helper = """
        import torch

        def grid(images, size, device):
            h = images.shape[-1] // size
            xs = torch.linspace(-1, 1, h).to(device)
            return images * xs
        """
    trainer = """
        from functools import partial
        import torch_xla
        import torch_xla.core.xla_model as xm
        from patches import grid

        class Trainer:
            def __init__(self, model, size):
                self.device = xm.xla_device()
                self.model = model
                self.size = size
                self.extract = partial(grid, device=self.device)

            def train(self, loader, optimizer):
                for images in loader:
                    self.step(images, optimizer)
                    torch_xla.sync()

            def step(self, images, optimizer):
                loss = self.model(self.extract(images, self.size)).mean()
                loss.backward()
                optimizer.step()
        """
    found = _findings(helper, path="patches.py", modules={"trainer.py": trainer})
    assert [(f.location.row, f.confidence) for f in found] == [(5, "high")]
    # a caller that passes a loop's variable for the size: no constant shown, so no default finding
    # (the other module's values are not carried over as varying, only as invariant)
    varying = trainer.replace("self.extract(images, self.size)", "self.extract(images, images.numel() % 7 + k)")
    varying = varying.replace("for images in loader:", "for k, images in enumerate(loader):")
    varying = varying.replace("self.step(images, optimizer)", "self.step(images, optimizer, k)")
    varying = varying.replace("def step(self, images, optimizer):", "def step(self, images, optimizer, k):")
    found = _findings(helper, path="patches.py", modules={"trainer.py": varying})
    assert [f.confidence for f in found] == ["possible"]


def test_a_parameter_no_module_shows_the_callers_of_is_possible():
    found = _findings(
        """
        import torch
        import torch_xla

        class Grid(torch.nn.Module):
            def __init__(self, n):
                super().__init__()
                self.n = n

            def forward(self, x):
                return x * offsets(x, self.n)

        def offsets(x, n):
            return torch.arange(n).to(x.device)
        """
    )
    assert [(f.location.row, f.confidence) for f in found] == [(13, "high")]  # `self.n`, set once
    found = _findings(
        """
        import torch
        import torch_xla

        class Grid(torch.nn.Module):
            def forward(self, x, n):
                return x * torch.arange(n).to(x.device)
        """
    )
    assert [f.confidence for f in found] == ["possible"]  # `n`: what the model's callers pass


@pytest.mark.parametrize(
    "body",
    [
        # the factory is given the device
        "xs = torch.linspace(-1, 1, x.shape[-1], device=x.device)",
        # the batch, and values computed from it: new data every step
        "xs = torch.tensor(x.tolist()).to(x.device)",
        "xs = torch.as_tensor([len(r) for r in rows]).to(x.device)",
        # a random factory: built on the device, it draws other numbers
        "xs = torch.randn(x.shape[-1]).to(x.device)",
        # a tensor filled with the step's values before the move: no constant
        "xs = torch.zeros(x.shape); xs[:, :1] = x[:, :1]; xs = xs.to(x.device)",
        "xs = torch.zeros(x.shape); xs.copy_(x); xs = xs.to(x.device)",
        # a list filled with the step's values, then made a tensor
        "lengths = []; lengths.append(len(rows)); xs = torch.tensor(lengths).to(x.device)",
        # moved to the CPU, or cast only
        "xs = torch.linspace(-1, 1, 8).to('cpu')",
        "xs = torch.linspace(-1, 1, 8).to(torch.float16)",
    ],
)
def test_near_misses_in_a_forward_are_not_reported(body):
    code = f"""
        import torch
        import torch_xla

        class Grid(torch.nn.Module):
            def forward(self, x, rows):
                {body}
                return x * xs
        """
    assert _findings(code) == []


def test_code_that_runs_once_or_only_for_evaluation_is_not_reported():
    code = """
        import torch
        import torch_xla.core.xla_model as xm

        class Grid(torch.nn.Module):
            def __init__(self, n):
                super().__init__()
                self.register_buffer("xs", torch.linspace(-1, 1, n))
                self.ys = torch.arange(n).to(xm.xla_device())  # once

        def train(model, loader, optimizer, device):
            offsets = torch.arange(16).to(device)  # before the loop: once
            for step, (x, y) in enumerate(loader):
                loss = (model(x + offsets) - y).pow(2).mean()
                loss.backward()
                xm.optimizer_step(optimizer)
                if step % 1000 == 0:
                    marks = torch.ones(4).to(device)  # every thousand steps
                    xm.master_print(marks)
        """
    assert _findings(code) == []


def test_cuda_only_code_is_not_reported():
    # a project with no XLA code at all
    cuda = """
        import torch

        class Grid(torch.nn.Module):
            def forward(self, x):
                return x * torch.linspace(-1, 1, x.shape[-1]).to(x.device)
        """
    assert _findings(cuda) == []
    # the CUDA branch of XLA code
    branch = """
        import torch
        import torch_xla

        class Grid(torch.nn.Module):
            def forward(self, x):
                if x.is_cuda:
                    return x * torch.linspace(-1, 1, x.shape[-1]).to(x.device)
                return x * torch.linspace(-1, 1, x.shape[-1], device=x.device)
        """
    assert _findings(branch) == []


def test_a_model_module_of_a_project_that_trains_on_xla_is_judged_without_importing_torch_xla():
    model = """
        import torch

        class Grid(torch.nn.Module):
            def forward(self, x):
                return x * torch.linspace(-1, 1, x.shape[-1]).to(x.device)
        """
    trainer = """
        import torch_xla.core.xla_model as xm
        from model import Grid

        model = Grid().to(xm.xla_device())
        """
    found = _findings(model, path="model.py", modules={"train_tpu.py": trainer})
    assert [f.location.row for f in found] == [5]


SCHEDULE = """
import numpy as np
import torch


def gather(table, t):
    return torch.from_numpy(table).to(t.device)[t]


class Diffusion:
    def __init__(self, steps):
        self.alphas = np.linspace(1e-4, 0.02, steps)

    def training_losses(self, model, x, t):
        return (model(x, t) - gather(self.alphas, t) * x).pow(2).mean()

    def sample(self, model, x):
        return x
"""
SPACED = """
import torch
from schedule import Diffusion


class SpacedDiffusion(Diffusion):
    def training_losses(self, model, *args):
        return super().training_losses(model, *args)
"""


def _checkout(run_cli, project, files: dict[str, str]) -> list[tuple[str, int, str]]:
    """(file, row, confidence) of XLA707's findings in an application checkout of `files`."""
    for name, code in files.items():
        project.write(name, textwrap.dedent(code).lstrip())
    out = run_cli("check", "--no-cache", "--select", "XLA707", "--output-format", "json", cwd=project)[1]
    return sorted((d["filename"], d["location"]["row"], d["confidence"]) for d in json.loads(out))


def test_a_loss_method_named_only_by_its_overrides_super_call_runs_at_no_step(run_cli, project):
    # the diffusion's loss is called by no script of the checkout (it only samples): an override's
    # `super().training_losses(...)` is no caller of it, so no step reaches the table's upload
    sampler = """
        import torch_xla.core.xla_model as xm
        from schedule import Diffusion

        diffusion = Diffusion(1000)
        print(diffusion.sample(model, x))
        """
    files = {"schedule.py": SCHEDULE, "respace.py": SPACED, "sample_tpu.py": sampler}
    assert _checkout(run_cli, project, files) == []
    # a training script that calls it every step: the upload is reported, with the loss on its chain
    trainer = """
        import torch_xla.core.xla_model as xm
        from respace import SpacedDiffusion

        diffusion = SpacedDiffusion(1000)
        for x, t in loader:
            loss = diffusion.training_losses(model, x, t)
            loss.backward()
            xm.optimizer_step(optimizer)
        """
    assert _checkout(run_cli, project, {**files, "train_tpu.py": trainer}) == [("schedule.py", 6, "high")]
