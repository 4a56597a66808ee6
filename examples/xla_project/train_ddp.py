"""Data-parallel CNN training in the torch_xla multi-process style.

On a TPU host, run one process per device with `torch_xla.launch(_mp_fn)`; each
process reads its own shard through MpDeviceLoader and steps with
xm.optimizer_step, which all-reduces the gradients first.  Under torchrun on GPUs
the model is wrapped in DistributedDataParallel instead.  Without torch_xla and
without a process group it trains in a single CPU process.
"""
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from data import SyntheticImageDataset  # noqa: E402

try:
    import torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.distributed.parallel_loader as pl
    import torch_xla.runtime as xr
except ImportError:  # CPU/GPU fallback so the script runs anywhere
    torch_xla = xm = pl = xr = None

NUM_CLASSES = 10
BATCH_SIZE = 32


class SmallCNN(nn.Module):
    def __init__(self, num_classes=NUM_CLASSES):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, kernel_size=3, padding=1)
        self.conv2 = nn.Conv2d(8, 16, kernel_size=3, stride=2, padding=1)
        self.fc = nn.Linear(16 * 6 * 6, num_classes)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        return self.fc(x.flatten(1))


def _log_step(step, loss, acc):
    # called once the step has executed, so reading the values costs no extra sync
    print(f"step {step} loss {loss.item():.4f} acc {acc.item():.3f}", file=sys.stderr)


def main(steps: int = 24, seed: int = 0) -> dict:
    torch.manual_seed(seed)
    if torch_xla is not None:
        torch_xla.manual_seed(seed)
    device = torch_xla.device() if torch_xla is not None else torch.device("cpu")
    world_size = xr.world_size() if xr is not None else 1
    rank = xr.global_ordinal() if xr is not None else 0

    dataset = SyntheticImageDataset(num_samples=8 * BATCH_SIZE, num_classes=NUM_CLASSES, seed=seed)
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=seed)
    train_loader = DataLoader(dataset, batch_size=BATCH_SIZE, sampler=sampler, drop_last=True)
    # MpDeviceLoader uploads batches in the background and syncs at the end of each step
    loader = pl.MpDeviceLoader(train_loader, device) if pl is not None else train_loader

    model = SmallCNN().to(device)
    if xm is None and dist.is_available() and dist.is_initialized():
        model = DDP(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    total_loss = torch.zeros((), device=device)
    correct = torch.zeros((), device=device)
    step, epoch, log_every = 0, 0, 8
    model.train()
    while step < steps:
        sampler.set_epoch(epoch)
        for images, labels in loader:
            if step >= steps:
                break
            images, labels = images.to(device), labels.to(device)
            optimizer.zero_grad()
            logits = model(images)
            loss = F.cross_entropy(logits, labels)
            loss.backward()
            if xm is not None:
                xm.optimizer_step(optimizer)
            else:
                optimizer.step()

            total_loss += loss.detach()
            hits = (logits.argmax(-1) == labels).float()
            correct += hits.sum()
            if step % log_every == 0:
                if xm is not None:
                    xm.add_step_closure(_log_step, args=(step, loss.detach(), hits.mean()))
                else:
                    _log_step(step, loss, hits.mean())
            step += 1
        epoch += 1

    checksum = sum(p.detach().abs().sum() for p in model.parameters())
    return {
        "final_loss": float(loss.detach().cpu()),
        "mean_loss": float(total_loss / step),
        "accuracy": float(correct / (step * BATCH_SIZE)),
        "param_checksum": float(checksum),
    }


def _mp_fn(index):
    result = main()
    xm.master_print(json.dumps(result))


if __name__ == "__main__":  # python train_x.py [steps]
    print(json.dumps(main(int(sys.argv[1])) if len(sys.argv) > 1 else main()))
