"""Train a small MLP classifier on synthetic Gaussian clusters.

Meant for a single TPU core through PyTorch/XLA; falls back to the CPU when
torch_xla is not installed.  Usage: python train_classifier.py
"""
import json
import math
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

try:
    import torch_xla
    import torch_xla.core.xla_model as xm
except ImportError:  # CPU/GPU fallback so the script runs anywhere
    torch_xla = xm = None

NUM_FEATURES = 16
NUM_CLASSES = 4
HIDDEN = 64
BATCH_SIZE = 32


class ClusterDataset(Dataset):
    """Points scattered around NUM_CLASSES random centres; the label is the centre index."""

    def __init__(self, num_samples, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.centres = torch.randn(NUM_CLASSES, NUM_FEATURES, generator=g) * 0.7
        self.labels = torch.randint(0, NUM_CLASSES, (num_samples,), generator=g)
        self.noise = torch.randn(num_samples, NUM_FEATURES, generator=g)

    def __len__(self):
        return self.labels.shape[0]

    def __getitem__(self, idx):
        label = self.labels[idx].item()
        features = self.centres[label] + self.noise[idx]
        return features, label


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(NUM_FEATURES, HIDDEN),
            nn.ReLU(),
            nn.Linear(HIDDEN, HIDDEN),
            nn.ReLU(),
            nn.Linear(HIDDEN, NUM_CLASSES),
        )

    def forward(self, x):
        return self.net(x)


def train(model, loader, optimizer, device, steps, log_every=10):
    """Run `steps` optimizer steps; returns (last loss, summed loss, summed accuracy).

    The running loss is kept as a Python float via .item() so it can be printed.
    """
    model.train()
    step = 0
    running_loss = 0.0
    acc_sum = 0.0
    loss = None
    for epoch in range(math.ceil(steps / len(loader))):
        for features, labels in loader:
            if step >= steps:
                break
            features, labels = features.to(device), labels.to(device)

            logits = model(features)
            loss = F.cross_entropy(logits, labels)
            if loss > 10.0:
                # diverging batch: skip the update instead of wrecking the weights
                optimizer.zero_grad(set_to_none=True)
                continue

            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, error_if_nonfinite=True)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

            running_loss += loss.item()
            acc = (logits.argmax(-1) == labels).float().mean().cpu()
            acc_sum += acc
            print(f"step {step} loss {loss}", file=sys.stderr)
            if step % log_every == 0:
                print(
                    f"epoch {epoch} step {step} batch loss {loss.item():.4f} "
                    f"avg loss {running_loss / (step + 1):.4f}",
                    file=sys.stderr,
                )
            step += 1

        # end of epoch: cut the graph and run what is pending
        if xm is not None:
            xm.mark_step()
    return loss, running_loss, acc_sum, step


def main(steps: int = 24, seed: int = 0) -> dict:
    torch.manual_seed(seed)
    device = xm.xla_device() if xm is not None else torch.device("cpu")

    dataset = ClusterDataset(num_samples=8 * BATCH_SIZE, seed=seed)
    loader = DataLoader(
        dataset,
        batch_size=BATCH_SIZE,
        shuffle=True,
        generator=torch.Generator().manual_seed(seed),
    )

    model = MLP().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss, running_loss, acc_sum, num_steps = train(model, loader, optimizer, device, steps)

    # final report, once, after training
    final_loss = loss.item()
    checksum = sum(p.detach().abs().sum() for p in model.parameters())
    return {
        "final_loss": final_loss,
        "mean_loss": float(running_loss / max(num_steps, 1)),
        "mean_acc": float(acc_sum / max(num_steps, 1)),
        "param_checksum": float(checksum),
    }


if __name__ == "__main__":  # python train_x.py [steps]
    print(json.dumps(main(int(sys.argv[1])) if len(sys.argv) > 1 else main()))
