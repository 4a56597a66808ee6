"""The real code the oracle runs: where each corpus comes from, how it is laid out, what runs.

Nothing here is vendored: sources come from the fetched mirrors (``/work/.mirror/<owner>+<name>/repo``,
override with ``ORACLE_MIRROR``) or from the installed torchvision, copied into a scratch folder.
What this module writes into a corpus is ours and says so: ``_oracle_driver.py`` (the compile entry
for library models, so that the static tool sees ``torch.compile(Model(...))`` exactly as it ran),
stand-ins for torchbench's harness modules, tiny synthetic data files and a ``pyproject.toml`` that
marks the project root for xlalint.
"""

from __future__ import annotations

import os
import pickle
import shutil
import subprocess
import sys
from dataclasses import dataclass, field

DRIVER = "_oracle_driver.py"
HEADER = '"""Oracle driver, written by benchmarks/compile_oracle (not part of this project)."""\n'


@dataclass
class Case:
    name: str
    script: str  # relative to the corpus root
    args: list = field(default_factory=list)
    timeout: int = 300


@dataclass
class Corpus:
    name: str
    source: str  # what it was laid out from, for the record
    layout: object  # callable(dest) -> provenance string
    cases: list
    stubs: list = field(default_factory=list)  # third-party modules imported but unused on the path
    # what the driver compiles besides module forwards, as xlalint's `compiled` names it (library
    # mode, `--with-entries`: what a user compiling these would write in the configuration)
    entries: list = field(default_factory=list)


def mirror(repo: str) -> str:
    base = os.environ.get("ORACLE_MIRROR", "/work/.mirror")
    git_dir = os.path.join(base, repo.replace("/", "+"), "repo")
    if not os.path.isdir(git_dir):
        raise FileNotFoundError(f"{repo}: no mirror at {git_dir} (fetch github:{repo} first)")
    return git_dir


def git_export(repo: str, dest: str, paths: list[str]) -> str:
    git_dir = mirror(repo)
    head = subprocess.run(["git", "--git-dir", git_dir, "rev-parse", "HEAD"], check=True,
                          capture_output=True, text=True).stdout.strip()
    archive = subprocess.run(["git", "--git-dir", git_dir, "archive", "HEAD", "--", *paths],
                             check=True, capture_output=True).stdout
    os.makedirs(dest, exist_ok=True)
    subprocess.run(["tar", "-x", "-C", dest], input=archive, check=True)
    return f"github:{repo}@{head}"


def write(dest: str, rel: str, text: str):
    path = os.path.join(dest, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as fh:
        fh.write(text)


def mark_root(dest: str):
    if not any(os.path.exists(os.path.join(dest, f)) for f in ("pyproject.toml", "setup.py")):
        write(dest, "pyproject.toml", '[project]\nname = "oracle-corpus"\nversion = "0"\n')


# ---------------------------------------------------------------- torchvision (installed, pinned)

TV_DRIVER = HEADER + '''import sys

import torch
import torch.nn.functional as F
from torchvision.models.convnext import CNBlockConfig, ConvNeXt
from torchvision.models.densenet import DenseNet
from torchvision.models.efficientnet import EfficientNet, _efficientnet_conf
from torchvision.models.googlenet import GoogLeNet
from torchvision.models.inception import Inception3
from torchvision.models.maxvit import MaxVit
from torchvision.models.mnasnet import MNASNet
from torchvision.models.mobilenetv2 import MobileNetV2
from torchvision.models.mobilenetv3 import MobileNetV3, _mobilenet_v3_conf
from torchvision.models.regnet import BlockParams, RegNet
from torchvision.models.resnet import BasicBlock, ResNet
from torchvision.models.shufflenetv2 import ShuffleNetV2
from torchvision.models.squeezenet import SqueezeNet
from torchvision.models.swin_transformer import SwinTransformer
from torchvision.models.vision_transformer import VisionTransformer


def steps(compiled, size, n=2):
    """Two training steps, then one evaluation call, as a small training script would."""
    opt = torch.optim.SGD(compiled.parameters(), lr=0.01)
    x, y = torch.randn(2, 3, size, size), torch.randint(0, 10, (2,))
    compiled.train()
    for _ in range(n):
        out = compiled(x)
        logits = out[0] if isinstance(out, tuple) else out
        loss = F.cross_entropy(logits, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    compiled.eval()
    with torch.no_grad():
        compiled(x)


def case_resnet18():
    model = ResNet(BasicBlock, [2, 2, 2, 2], num_classes=10)
    steps(torch.compile(model, backend="eager"), 64)


def case_mobilenet_v2():
    model = MobileNetV2(num_classes=10)
    steps(torch.compile(model, backend="eager"), 64)


def case_mobilenet_v3_small():
    setting, last_channel = _mobilenet_v3_conf("mobilenet_v3_small")
    model = MobileNetV3(setting, last_channel, num_classes=10)
    steps(torch.compile(model, backend="eager"), 64)


def case_efficientnet_b0():
    setting, last_channel = _efficientnet_conf("efficientnet_b0", width_mult=1.0, depth_mult=1.0)
    model = EfficientNet(setting, 0.2, last_channel=last_channel, num_classes=10)
    steps(torch.compile(model, backend="eager"), 64)


def case_densenet():
    model = DenseNet(growth_rate=12, block_config=(2, 2, 2, 2), num_init_features=16, num_classes=10)
    steps(torch.compile(model, backend="eager"), 64)


def case_shufflenet_v2():
    model = ShuffleNetV2([4, 8, 4], [24, 48, 96, 192, 1024], num_classes=10)
    steps(torch.compile(model, backend="eager"), 64)


def case_squeezenet():
    model = SqueezeNet("1_1", num_classes=10)
    steps(torch.compile(model, backend="eager"), 64)


def case_mnasnet():
    model = MNASNet(0.5, num_classes=10)
    steps(torch.compile(model, backend="eager"), 64)


def case_googlenet():
    model = GoogLeNet(num_classes=10, aux_logits=True, init_weights=False)
    steps(torch.compile(model, backend="eager"), 96)


def case_inception_v3():
    model = Inception3(num_classes=10, aux_logits=False, init_weights=False)
    steps(torch.compile(model, backend="eager"), 80)


def case_regnet():
    params = BlockParams.from_init_params(depth=4, w_0=8, w_a=8.0, w_m=2.0, group_width=8)
    model = RegNet(params, num_classes=10)
    steps(torch.compile(model, backend="eager"), 64)


def case_convnext():
    setting = [CNBlockConfig(16, 32, 1), CNBlockConfig(32, None, 1)]
    model = ConvNeXt(setting, num_classes=10)
    steps(torch.compile(model, backend="eager"), 64)


def case_vit():
    model = VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=32,
                              mlp_dim=64, num_classes=10)
    steps(torch.compile(model, backend="eager"), 32)


def case_swin():
    model = SwinTransformer(patch_size=[4, 4], embed_dim=24, depths=[2, 2], num_heads=[2, 2],
                            window_size=[4, 4], num_classes=10)
    steps(torch.compile(model, backend="eager"), 64)


def case_maxvit():
    model = MaxVit(input_size=(64, 64), stem_channels=16, partition_size=2, block_channels=[16, 32],
                   block_layers=[1, 1], head_dim=8, stochastic_depth_prob=0.0, num_classes=10)
    steps(torch.compile(model, backend="eager"), 64)


if __name__ == "__main__":
    globals()["case_" + sys.argv[1]]()
'''

TV_CASES = ["resnet18", "mobilenet_v2", "mobilenet_v3_small", "efficientnet_b0", "densenet", "shufflenet_v2",
            "squeezenet", "mnasnet", "googlenet", "inception_v3", "regnet", "convnext", "vit", "swin", "maxvit"]


def layout_torchvision(dest: str) -> str:
    # ask the interpreter that runs the cases (it has torchvision; the one scoring may not), without
    # importing torchvision (its CUDA-built C ops fail to load on CPU torch)
    python = os.environ.get("ORACLE_PYTHON", sys.executable)
    probe = ("import importlib.util, importlib.metadata as m; s = importlib.util.find_spec('torchvision'); "
             "print(list(s.submodule_search_locations)[0]); print(m.version('torchvision'))")
    proc = subprocess.run([python, "-c", probe], capture_output=True, text=True)
    if proc.returncode != 0:
        raise FileNotFoundError(f"torchvision is not installed for {python} "
                                "(pip install --no-deps torchvision==0.28.0 pillow)")
    src, tv_version = proc.stdout.split()
    shutil.copytree(src, os.path.join(dest, "torchvision"),
                    ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.so.*", "*.dll"))
    write(dest, DRIVER, TV_DRIVER)
    mark_root(dest)
    return f"torchvision=={tv_version} (installed wheel, .py files)"


# ---------------------------------------------------------------- nanoGPT (train.py / sample.py as they are)

NANOGPT_ARGS = ["--dataset=shakespeare_char", "--device=cpu", "--dtype=float32", "--compile=True",
                "--n_layer=2", "--n_head=2", "--n_embd=32", "--block_size=32", "--batch_size=4",
                "--max_iters=4", "--eval_interval=2", "--eval_iters=2", "--log_interval=1",
                "--gradient_accumulation_steps=1", "--out_dir=../nanogpt_out", "--wandb_log=False"]
SAMPLE_ARGS = ["--init_from=resume", "--out_dir=../nanogpt_out", "--device=cpu", "--dtype=float32",
               "--compile=True", "--num_samples=2", "--max_new_tokens=6", "--start=hello"]


def layout_nanogpt(dest: str) -> str:
    prov = git_export("karpathy/nanoGPT", dest, ["model.py", "train.py", "sample.py", "configurator.py",
                                                 "bench.py", "config"])
    import numpy as np

    text = "hello world, the quick brown fox jumps over the lazy dog.\n" * 40
    chars = sorted(set(text))
    stoi = {c: i for i, c in enumerate(chars)}
    data_dir = os.path.join(dest, "data", "shakespeare_char")
    os.makedirs(data_dir, exist_ok=True)
    ids = np.array([stoi[c] for c in text], dtype=np.uint16)
    ids[: len(ids) * 9 // 10].tofile(os.path.join(data_dir, "train.bin"))
    ids[len(ids) * 9 // 10 :].tofile(os.path.join(data_dir, "val.bin"))
    with open(os.path.join(data_dir, "meta.pkl"), "wb") as fh:
        pickle.dump({"vocab_size": len(chars), "stoi": stoi, "itos": dict(enumerate(chars))}, fh)
    os.makedirs(os.path.join(os.path.dirname(dest), "nanogpt_out"), exist_ok=True)
    mark_root(dest)
    return prov + " (+ synthetic 2 KB char data set)"


# ---------------------------------------------------------------- gpt-fast (generate.py's compiled decode)

GPTFAST_DRIVER = HEADER + '''import sys

import torch

import generate
from model import ModelArgs, Transformer


def case_generate():
    """What generate.main() does, minus checkpoint and tokenizer: compile decode and prefill, generate."""
    torch.manual_seed(0)
    model = Transformer(ModelArgs(block_size=64, n_layer=2, n_head=4, dim=64, vocab_size=256))
    generate.decode_one_token = torch.compile(generate.decode_one_token, backend="eager", fullgraph=True)
    generate.prefill = torch.compile(generate.prefill, backend="eager", dynamic=True, fullgraph=True)
    for prompt_len in (8, 11):
        prompt = torch.randint(0, 256, (prompt_len,))
        generate.generate(model, prompt, max_new_tokens=6, batch_size=1, interactive=False,
                          draft_model=None, temperature=0.8, top_k=20)


def case_forward():
    """The model compiled whole, called with a growing input_pos as a plain decode loop would."""
    model = Transformer(ModelArgs(block_size=64, n_layer=2, n_head=4, dim=64, vocab_size=256))
    model.setup_caches(max_batch_size=1, max_seq_length=32)
    compiled = torch.compile(model, backend="eager")
    x = torch.randint(0, 256, (1, 4))
    with torch.no_grad():
        compiled(x, torch.arange(0, 4))
        tok = x[:, -1:]
        for pos in range(4, 10):
            logits = compiled(tok, torch.tensor([pos]))
            tok = logits[:, -1].argmax(-1, keepdim=True)


if __name__ == "__main__":
    globals()["case_" + sys.argv[1]]()
'''


def layout_gptfast(dest: str) -> str:
    prov = git_export("pytorch-labs/gpt-fast", dest, ["model.py", "generate.py", "tokenizer.py", "tp.py",
                                                      "quantize.py", "GPTQ.py", "eval.py", "setup.py"])
    write(dest, DRIVER, GPTFAST_DRIVER)
    mark_root(dest)
    return prov


# ---------------------------------------------------------------- hifi-gan (a GAN vocoder's training step)

HIFIGAN_DRIVER = HEADER + '''import json
import sys

import torch
import torch.nn.functional as F

from env import AttrDict
from models import (Generator, MultiPeriodDiscriminator, MultiScaleDiscriminator, discriminator_loss, feature_loss,
                    generator_loss)


def case_train():
    """train.py's step with its three modules compiled (mel loss left out: it needs librosa's filters),
    config_v1 made small; the losses run eagerly as train.py runs them."""
    with open("config_v1.json") as fh:
        h = AttrDict(json.load(fh))
    h.update(upsample_initial_channel=32, upsample_rates=[4, 4], upsample_kernel_sizes=[8, 8],
             resblock_kernel_sizes=[3, 5], resblock_dilation_sizes=[[1, 3, 5], [1, 3, 5]])
    generator = torch.compile(Generator(h))
    mpd = torch.compile(MultiPeriodDiscriminator())
    msd = torch.compile(MultiScaleDiscriminator())
    optim_g = torch.optim.AdamW(generator.parameters(), h.learning_rate, betas=[h.adam_b1, h.adam_b2])
    optim_d = torch.optim.AdamW(list(msd.parameters()) + list(mpd.parameters()), h.learning_rate,
                                betas=[h.adam_b1, h.adam_b2])
    x, y = torch.randn(2, 80, 16), torch.randn(2, 1, 256)
    for _ in range(2):
        y_g_hat = generator(x)
        optim_d.zero_grad()
        y_df_hat_r, y_df_hat_g, _, _ = mpd(y, y_g_hat.detach())
        loss_disc_f, _, _ = discriminator_loss(y_df_hat_r, y_df_hat_g)
        y_ds_hat_r, y_ds_hat_g, _, _ = msd(y, y_g_hat.detach())
        loss_disc_s, _, _ = discriminator_loss(y_ds_hat_r, y_ds_hat_g)
        (loss_disc_s + loss_disc_f).backward()
        optim_d.step()
        optim_g.zero_grad()
        y_df_hat_r, y_df_hat_g, fmap_f_r, fmap_f_g = mpd(y, y_g_hat)
        y_ds_hat_r, y_ds_hat_g, fmap_s_r, fmap_s_g = msd(y, y_g_hat)
        loss_gen_f, _ = generator_loss(y_df_hat_g)
        loss_gen_s, _ = generator_loss(y_ds_hat_g)
        loss = loss_gen_s + loss_gen_f + feature_loss(fmap_f_r, fmap_f_g) + feature_loss(fmap_s_r, fmap_s_g)
        loss = loss + F.l1_loss(y_g_hat, y) * 45
        loss.backward()
        optim_g.step()


if __name__ == "__main__":
    globals()["case_" + sys.argv[1]]()
'''


def layout_hifigan(dest: str) -> str:
    prov = git_export("jik876/hifi-gan", dest, ["models.py", "utils.py", "env.py", "train.py", "meldataset.py",
                                                 "inference.py", "inference_e2e.py", "config_v1.json"])
    write(dest, DRIVER, HIFIGAN_DRIVER)
    mark_root(dest)
    return prov


# ---------------------------------------------------------------- torchbench models (their own code)

TB_MODELS = ["maml", "microbench_unbacked_tolist_sum", "pyhpc_equation_of_state", "BERT_pytorch", "dcgan",
             "nvidia_deeprecommender", "tacotron2", "lennard_jones", "speech_transformer", "pyhpc_isoneutral_mixing",
             "pyhpc_turbulent_kinetic_energy", "tts_angular", "llama", "soft_actor_critic", "demucs"]
TB_STUBS = {
    "torchbenchmark/__init__.py": "DATA_PATH = 'data'  # stand-in (oracle harness)\n",
    "torchbenchmark/models/__init__.py": "",
    "torchbenchmark/util/__init__.py": "",
    "torchbenchmark/tasks.py": (
        "# stand-in for torchbench's task enum (oracle harness)\n"
        "class _Task:\n    def __getattr__(self, name):\n        return name\n\n"
        "COMPUTER_VISION = NLP = OTHER = SPEECH = RECOMMENDATION = REINFORCEMENT_LEARNING = GENERATION = _Task()\n"
    ),
    "torchbenchmark/util/env_check.py": "def set_random_seed():\n    pass\n",
    "torchbenchmark/util/model.py": (
        "# stand-in for torchbench's BenchmarkModel (oracle harness): only what the models read\n"
        "class BenchmarkModel:\n"
        "    DEFAULT_TRAIN_BSIZE = DEFAULT_EVAL_BSIZE = 1\n"
        "    def __init__(self, test, device, batch_size=None, extra_args=[]):\n"
        "        self.test, self.device, self.extra_args = test, device, extra_args\n"
        "        self.batch_size = batch_size or (self.DEFAULT_TRAIN_BSIZE if test == 'train' else self.DEFAULT_EVAL_BSIZE)\n"
    ),
}

TB_DRIVER = HEADER + '''import sys
from argparse import Namespace

import numpy as np
import torch

from torchbenchmark.models.BERT_pytorch.bert_pytorch.model import BERT, BERTLM
from torchbenchmark.models.dcgan import DCGAN, Discriminator, Generator
from torchbenchmark.models.maml.meta import Meta
from torchbenchmark.models.microbench_unbacked_tolist_sum import MicrobenchUnbackedTolistSum
from torchbenchmark.models.nvidia_deeprecommender.reco_encoder.model.model import AutoEncoder, MSEloss
from torchbenchmark.models.pyhpc_equation_of_state import EquationOfState
from torchbenchmark.models.lennard_jones import lennard_jones, loss_fn, make_prediction, sigma
from torchbenchmark.models.tacotron2.model import Tacotron2
from torchbenchmark.models.speech_transformer.speech_transformer.transformer import Transformer as SpeechTransformer
from torchbenchmark.models.speech_transformer.speech_transformer.transformer.decoder import Decoder
from torchbenchmark.models.speech_transformer.speech_transformer.transformer.encoder import Encoder
from torchbenchmark.models.speech_transformer.speech_transformer.transformer.loss import cal_performance
from torchbenchmark.models.pyhpc_isoneutral_mixing import IsoneutralMixing, isoneutral_pytorch
from torchbenchmark.models.pyhpc_isoneutral_mixing import _generate_inputs as isoneutral_inputs
from torchbenchmark.models.pyhpc_turbulent_kinetic_energy import TurbulentKineticEnergy, tke_pytorch
from torchbenchmark.models.pyhpc_turbulent_kinetic_energy import _generate_inputs as tke_inputs
from torchbenchmark.models.tts_angular.model import SpeakerEncoder
from torchbenchmark.models.llama.model import ModelArgs as LlamaArgs, Transformer as Llama
from torchbenchmark.models.soft_actor_critic import learn_standard
from torchbenchmark.models.soft_actor_critic.replay import ReplayBuffer
from torchbenchmark.models.soft_actor_critic.sac import SACAgent
from torchbenchmark.models.demucs import DemucsWrapper
from torchbenchmark.models.demucs.demucs.augment import FlipChannels, FlipSign, Remix, Shift
from torchbenchmark.models.demucs.demucs.model import Demucs
from torchbenchmark.models.demucs.demucs.utils import center_trim


def case_maml():
    """torchbench's maml config, smaller: Meta.forward runs the inner fine-tuning loop."""
    args = Namespace(n_way=5, k_spt=1, k_qry=3, imgsz=28, imgc=1, task_num=2, meta_lr=1e-3, update_lr=0.4,
                     update_step=2, update_step_test=3)
    config = [("conv2d", [8, 1, 3, 3, 2, 0]), ("relu", [True]), ("bn", [8]), ("conv2d", [8, 8, 3, 3, 2, 0]),
              ("relu", [True]), ("bn", [8]), ("flatten", []), ("linear", [args.n_way, 8 * 6 * 6])]
    model = Meta(args, config)
    compiled = torch.compile(model, backend="eager")
    x_spt = torch.randn(args.task_num, args.n_way, 1, 28, 28)
    y_spt = torch.randint(0, args.n_way, (args.task_num, args.n_way))
    x_qry = torch.randn(args.task_num, args.n_way * args.k_qry, 1, 28, 28)
    y_qry = torch.randint(0, args.n_way, (args.task_num, args.n_way * args.k_qry))
    for _ in range(2):
        compiled(x_spt, y_spt, x_qry, y_qry)


def case_microbench_unbacked_tolist_sum():
    model = MicrobenchUnbackedTolistSum()
    compiled = torch.compile(model, backend="eager")
    for _ in range(2):
        compiled(torch.randn(1), torch.arange(20, dtype=torch.int32), torch.ones(20, dtype=torch.int32))


def case_pyhpc_equation_of_state():
    model = EquationOfState()
    compiled = torch.compile(model, backend="eager")
    rng = np.random.default_rng(17)
    s = torch.from_numpy(rng.uniform(1e-2, 10, size=(8, 8, 2)))
    t = torch.from_numpy(rng.uniform(-12, 20, size=(8, 8, 2)))
    p = torch.from_numpy(rng.uniform(0, 1000, size=(1, 1, 2)))
    for _ in range(2):
        compiled(s, t, p)


def case_bert():
    model = BERTLM(BERT(100, hidden=32, n_layers=2, attn_heads=2), 100)
    compiled = torch.compile(model, backend="eager")
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randint(1, 100, (2, 16))
    seg = torch.randint(1, 3, (2, 16))
    for _ in range(2):
        next_sent, mask_lm = compiled(x, seg)
        loss = next_sent.sum() + mask_lm.sum()
        opt.zero_grad()
        loss.backward()
        opt.step()


def case_dcgan():
    class Bench:
        device, batch_size = "cpu", 2

    dcgan = DCGAN(Bench())
    generator = Generator(dcgan)
    discriminator = Discriminator(dcgan)
    g = torch.compile(generator, backend="eager")
    d = torch.compile(discriminator, backend="eager")
    noise = torch.randn(2, dcgan.nz, 1, 1)
    for _ in range(2):
        d(g(noise)).mean().backward()


def case_deeprecommender():
    model = AutoEncoder(layer_sizes=[64, 32, 16], nl_type="selu", is_constrained=False, dp_drop_prob=0.1)
    compiled = torch.compile(model, backend="eager")
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.rand(4, 64)
    for _ in range(2):
        out = compiled(x)
        loss, num_ratings = MSEloss(out, x)
        loss = loss / num_ratings
        opt.zero_grad()
        loss.backward()
        opt.step()


def case_tacotron2():
    """A training step (teacher forcing, padded batch) and a compiled inference (stop-token loop)."""
    hp = Namespace(mask_padding=True, n_mel_channels=16, n_frames_per_step=1, symbols_embedding_dim=32,
                   n_symbols=40, encoder_kernel_size=5, encoder_n_convolutions=2, encoder_embedding_dim=32,
                   attention_rnn_dim=32, attention_dim=16, attention_location_n_filters=4,
                   attention_location_kernel_size=5, decoder_rnn_dim=32, prenet_dim=16, max_decoder_steps=8,
                   gate_threshold=0.5, p_attention_dropout=0.1, p_decoder_dropout=0.1, postnet_embedding_dim=16,
                   postnet_kernel_size=5, postnet_n_convolutions=2, fp16_run=False)
    model = Tacotron2(hp)
    compiled = torch.compile(model, backend="eager")
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    text, text_lengths = torch.randint(1, 40, (2, 10)), torch.tensor([10, 8])
    mels, out_lengths = torch.randn(2, 16, 6), torch.tensor([6, 5])
    for _ in range(2):
        mel, mel_post, gate, _ = compiled((text, text_lengths, mels, 10, out_lengths))
        loss = (mel - mels).pow(2).mean() + (mel_post - mels).pow(2).mean() + gate.sigmoid().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    infer = torch.compile(model.inference, backend="eager")
    with torch.no_grad():
        infer(text[:1])


def case_lennard_jones():
    """torchbench's training step, its prediction function compiled (vmap(jacrev(model)) inside)."""
    model = torch.nn.Sequential(torch.nn.Linear(1, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    predict = torch.compile(make_prediction, backend="eager")
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    drs = torch.outer(torch.linspace(0.5, 2 * sigma, steps=32), torch.tensor([1.0, 0, 0]))
    norms = torch.linalg.norm(drs, dim=1).reshape(-1, 1)
    energies = lennard_jones(norms)
    forces = torch.zeros_like(drs)
    for _ in range(2):
        pred_e, pred_f = predict(model, drs)
        loss = loss_fn(energies, forces, pred_e, pred_f)
        opt.zero_grad()
        loss.backward()
        opt.step()


def case_speech_transformer():
    """Speech-Transformer (kaituoxu): a training step on a padded batch (targets padded with IGNORE_ID),
    then its beam search compiled as `model.recognize`."""

    encoder = Encoder(8, 1, 2, 8, 8, 16, 32, dropout=0.1, pe_maxlen=64)
    decoder = Decoder(1, 2, 12, 16, 1, 2, 8, 8, 16, 32, dropout=0.1, pe_maxlen=64)
    model = SpeechTransformer(encoder, decoder)
    compiled = torch.compile(model, backend="eager")
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    padded_input, input_lengths = torch.randn(2, 12, 8), torch.tensor([12, 9])
    padded_target = torch.tensor([[3, 4, 5, 6, 7], [3, 5, 8, -1, -1]])
    for _ in range(2):
        pred, gold = compiled(padded_input, input_lengths, padded_target)
        loss, n_correct = cal_performance(pred, gold, smoothing=0.1)
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    recognize = torch.compile(model.recognize, backend="eager")
    args = Namespace(beam_size=2, nbest=1, decode_max_len=3)
    with torch.no_grad():
        recognize(padded_input[0], input_lengths[:1], [str(i) for i in range(12)], args)


def case_pyhpc_isoneutral_mixing():

    model = IsoneutralMixing()
    inputs = isoneutral_pytorch.prepare_inputs(*isoneutral_inputs(64), device="cpu")
    compiled = torch.compile(model, backend="eager")
    for _ in range(2):
        compiled(*inputs)


def case_pyhpc_turbulent_kinetic_energy():

    model = TurbulentKineticEnergy("cpu")
    inputs = tke_pytorch.prepare_inputs(*tke_inputs(4096), device="cpu")
    compiled = torch.compile(model, backend="eager")
    for _ in range(2):
        compiled(*inputs)


def case_tts_angular():
    """The speaker encoder: a training step, then `compute_embedding` (sliding windows) compiled."""

    model = SpeakerEncoder(input_dim=8, proj_dim=8, lstm_dim=16, num_lstm_layers=2)
    compiled = torch.compile(model, backend="eager")
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(2, 20, 8)
    for _ in range(2):
        loss = compiled(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    embed = torch.compile(model.compute_embedding, backend="eager")
    embed(torch.randn(1, 40, 8), num_frames=16)


def case_llama():
    """torchbench's llama: prefill, then a decode loop passing the position as a Python int."""

    model = Llama(LlamaArgs(dim=32, n_layers=2, n_heads=2, vocab_size=64, max_batch_size=1, max_seq_len=32))
    compiled = torch.compile(model, backend="eager")
    tokens = torch.randint(0, 64, (1, 4))
    with torch.no_grad():
        logits = compiled(tokens, 0)
        for pos in range(4, 10):
            tok = logits.argmax(-1, keepdim=True)
            logits = compiled(tok, pos)


def case_soft_actor_critic():
    """SAC: its whole `learn_standard` update compiled (buffer sampling, three optimizers), and the
    agent's numpy-in/numpy-out `forward` compiled."""

    agent = SACAgent(4, 2, -10, 2, "cpu", hidden_size=16)
    target = SACAgent(4, 2, -10, 2, "cpu", hidden_size=16)
    buffer = ReplayBuffer(32, "cpu", state_shape=(4,), action_shape=(2,))
    for _ in range(16):
        buffer.push(np.random.randn(4).astype(np.float32), np.random.randn(2).astype(np.float32), 1.0,
                    np.random.randn(4).astype(np.float32), False)
    log_alpha = torch.tensor(0.0, requires_grad=True)
    actor_opt = torch.optim.Adam(agent.actor.parameters(), lr=1e-3)
    critic_opt = torch.optim.Adam(list(agent.critic1.parameters()) + list(agent.critic2.parameters()), lr=1e-3)
    alpha_opt = torch.optim.Adam([log_alpha], lr=1e-3)
    learn = torch.compile(learn_standard, backend="eager")
    for _ in range(2):
        learn(buffer, target, agent, actor_opt, critic_opt, alpha_opt, -2.0, 8, log_alpha, 0.99, 1.0, 1.0,
              update_policy=True, device="cpu")
    act = torch.compile(agent.forward, backend="eager")
    for _ in range(2):
        act(np.random.randn(4).astype(np.float32))


def case_demucs():
    """Demucs with torchbench's augmentation chain (sign/channel flips, shift, remix), a training step."""

    augment = torch.nn.Sequential(FlipSign(), FlipChannels(), Shift(64), Remix(group_size=2))
    model = DemucsWrapper(Demucs(channels=8, depth=3, lstm_layers=1), augment)
    compiled = torch.compile(model, backend="eager")
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    streams = torch.rand(2, 5, 2, 2048)
    for _ in range(2):
        sources, estimates = compiled(streams)
        loss = torch.nn.functional.l1_loss(estimates, center_trim(sources, estimates))
        loss.backward()
        opt.step()
        opt.zero_grad()


if __name__ == "__main__":
    globals()["case_" + sys.argv[1]]()
'''


def layout_torchbench(dest: str) -> str:
    prov = git_export("pytorch/benchmark", dest, [f"torchbenchmark/models/{m}" for m in TB_MODELS]
                      + ["torchbenchmark/util/distribution.py"])
    for rel, text in TB_STUBS.items():
        write(dest, rel, text)
    write(dest, DRIVER, TB_DRIVER)
    mark_root(dest)
    return prov + " (models only; torchbench harness modules replaced by stand-ins)"


# ---------------------------------------------------------------- timm (installed, pinned)

TIMM_DRIVER = HEADER + '''import sys

import timm
import torch
import torch.nn.functional as F

# name -> (input size, create_model keywords): small inputs, random weights (no download)
MODELS = {
    "resnet18": (64, {}),
    "efficientnet_b0": (64, {}),
    "mobilenetv3_small_050": (64, {}),
    "convnext_atto": (64, {}),
    "regnetx_002": (64, {}),
    "vit_tiny_patch16_224": (64, {"img_size": 64}),
    "deit_tiny_patch16_224": (64, {"img_size": 64}),
    "mixer_s16_224": (64, {"img_size": 64}),
}


def run(name):
    """Two training steps, then one evaluation call, as a small training script would."""
    size, kwargs = MODELS[name]
    compiled = torch.compile(timm.create_model(name, pretrained=False, num_classes=10, **kwargs), backend="eager")
    opt = torch.optim.SGD(compiled.parameters(), lr=0.01)
    x, y = torch.randn(2, 3, size, size), torch.randint(0, 10, (2,))
    compiled.train()
    for _ in range(2):
        loss = F.cross_entropy(compiled(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    compiled.eval()
    with torch.no_grad():
        compiled(x)


if __name__ == "__main__":
    run(sys.argv[1])
'''

TIMM_CASES = ["resnet18", "efficientnet_b0", "mobilenetv3_small_050", "convnext_atto", "regnetx_002",
              "vit_tiny_patch16_224", "deit_tiny_patch16_224", "mixer_s16_224"]


def layout_timm(dest: str) -> str:
    python = os.environ.get("ORACLE_PYTHON", sys.executable)
    probe = ("import importlib.util, importlib.metadata as m; s = importlib.util.find_spec('timm'); "
             "print(list(s.submodule_search_locations)[0]); print(m.version('timm'))")
    proc = subprocess.run([python, "-c", probe], capture_output=True, text=True)
    if proc.returncode != 0:
        raise FileNotFoundError(f"timm is not installed for {python} (pip install --no-deps timm==1.0.31)")
    src, version = proc.stdout.split()
    shutil.copytree(src, os.path.join(dest, "timm"), ignore=shutil.ignore_patterns("__pycache__"))
    write(dest, DRIVER, TIMM_DRIVER)
    mark_root(dest)
    return f"timm=={version} (installed wheel, .py files)"


def corpora() -> list[Corpus]:
    drv = lambda names, t=300: [Case(n, DRIVER, [n], t) for n in names]  # noqa: E731
    return [
        Corpus("torchvision", "installed torchvision", layout_torchvision, drv(TV_CASES, 240)),
        Corpus("timm", "installed timm", layout_timm, drv(TIMM_CASES, 240)),
        Corpus("nanogpt", "github:karpathy/nanoGPT", layout_nanogpt,
               [Case("train", "train.py", NANOGPT_ARGS, 300), Case("sample", "sample.py", SAMPLE_ARGS, 240)],
               stubs=["tiktoken"]),  # sample.py imports it; with the data set's meta.pkl it is unused
        Corpus("gpt-fast", "github:pytorch-labs/gpt-fast", layout_gptfast, drv(["generate", "forward"]),
               stubs=["sentencepiece", "tiktoken", "tiktoken.load"]),
        Corpus("hifi-gan", "github:jik876/hifi-gan", layout_hifigan, drv(["train"]),
               stubs=["matplotlib", "matplotlib.pylab"]),  # utils.py plots spectrograms (unused here)
        Corpus("torchbench", "github:pytorch/benchmark", layout_torchbench,
               drv(["maml", "microbench_unbacked_tolist_sum", "pyhpc_equation_of_state", "bert", "dcgan",
                    "deeprecommender", "tacotron2", "lennard_jones", "speech_transformer", "pyhpc_isoneutral_mixing",
                    "pyhpc_turbulent_kinetic_energy", "tts_angular", "llama", "soft_actor_critic", "demucs"]),
               stubs=["tqdm", "librosa", "librosa.filters", "librosa.util", "inflect", "unidecode", "kaldi_io",
                      "gymnasium", "sentencepiece", "musdb", "museval", "treetable", "requests"],
               entries=["torchbenchmark.models.tacotron2.model:Tacotron2.inference",
                        "torchbenchmark.models.lennard_jones:make_prediction",
                        "torchbenchmark.models.speech_transformer.speech_transformer.transformer.transformer:"
                        "Transformer.recognize",
                        "torchbenchmark.models.tts_angular.model:SpeakerEncoder.compute_embedding",
                        "torchbenchmark.models.soft_actor_critic:learn_standard",
                        "torchbenchmark.models.soft_actor_critic.sac:SACAgent.forward"]),
    ]


def lay_out(corpus: Corpus, work: str) -> tuple[str, str]:
    """(Re)create the corpus tree under ``work``; returns (root, provenance)."""
    root = os.path.join(work, corpus.name)
    if os.path.exists(root):
        shutil.rmtree(root)
    os.makedirs(root)
    return root, corpus.layout(root)
