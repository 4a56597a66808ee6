"""TorchTPU (Google's `torch.device("tpu")` plug-in, checked against torch-tpu 0.2.0): its own hazards
(TPU2xx, preview) and the opt-in torch_xla -> TorchTPU migration (TPU1xx, `--target torchtpu`),
one rule per module; the migration's moves are data (`torchtpu_migrations.toml`)."""

from .compile_dynamic_on_tpu import CompileDynamicOnTpu
from .inductor_backend_on_tpu import InductorBackendOnTpu
from .inductor_option_on_tpu import InductorOptionOnTpu
from .inference_mode_compiled import InferenceModeCompiled
from .internal_tpu_device_api import InternalTpuDeviceApi
from .optimizer_not_capturable import OptimizerNotCapturable
from .torch_tpu_api_device import TorchTpuApiDevice
from .xla_autocast import XlaAutocast
from .xla_collective import XlaCollective
from .xla_compile import XlaCompile
from .xla_device import XlaDevice
from .xla_device_loader import XlaDeviceLoader
from .xla_eager_mode import XlaEagerMode
from .xla_environment import XlaEnvironment
from .xla_metrics import XlaMetrics
from .xla_optimizer_step import XlaOptimizerStep
from .xla_process_group import XlaProcessGroup
from .xla_rank import XlaRank
from .xla_save import XlaSave
from .xla_spawn import XlaSpawn
from .xla_spmd import XlaSpmd
from .xla_step_barrier import XlaStepBarrier
from .xla_wait_device_ops import XlaWaitDeviceOps

# The family's codes start with CODES and its rules' categories are among CATEGORIES (checked by the
# registry, xlalint.rules): TPU1xx the torch_xla -> TorchTPU migration, TPU2xx TorchTPU's hazards.
CODES = "TPU"
CATEGORIES = ("deprecated_xla_api", "optimizer_step", "other")

__all__ = [
    "CompileDynamicOnTpu",
    "InductorBackendOnTpu",
    "InductorOptionOnTpu",
    "InferenceModeCompiled",
    "InternalTpuDeviceApi",
    "OptimizerNotCapturable",
    "TorchTpuApiDevice",
    "XlaAutocast",
    "XlaCollective",
    "XlaCompile",
    "XlaDevice",
    "XlaDeviceLoader",
    "XlaEagerMode",
    "XlaEnvironment",
    "XlaMetrics",
    "XlaOptimizerStep",
    "XlaProcessGroup",
    "XlaRank",
    "XlaSave",
    "XlaSpawn",
    "XlaSpmd",
    "XlaStepBarrier",
    "XlaWaitDeviceOps",
]
