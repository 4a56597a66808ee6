"""The MNIST training loop of the early PyTorch/XLA performance guide, on synthetic MNIST-shaped data.

A 2019-style single-device loop: a plain DataLoader, the loss read with `.item()` every step
and `optimizer.step()` with nothing that cuts the graph.  Falls back to the CPU when torch_xla
is not installed.  Usage: python train_mnist_guide.py
"""
import json
import math
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

try:
    import torch_xla
    import torch_xla.core.xla_model as xm
except ImportError:  # CPU/GPU fallback so the script runs anywhere
    torch_xla = xm = None

NUM_IMAGES = 1000  # not a multiple of BATCH_SIZE: the last batch of each epoch holds 40 images
NUM_CLASSES = 10
BATCH_SIZE = 64


def synthetic_mnist(num_images, seed=0):
    """28x28 single-channel images: a fixed random template per class plus noise."""
    g = torch.Generator().manual_seed(seed)
    templates = torch.rand(NUM_CLASSES, 1, 28, 28, generator=g)
    labels = torch.randint(0, NUM_CLASSES, (num_images,), generator=g)
    images = templates[labels] + 0.5 * torch.randn(num_images, 1, 28, 28, generator=g)
    return TensorDataset((images - 0.1307) / 0.3081, labels)


class MNIST(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 10, kernel_size=5)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
        self.fc1 = nn.Linear(320, 50)
        self.fc2 = nn.Linear(50, NUM_CLASSES)

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2(x), 2))
        x = F.relu(self.fc1(torch.flatten(x, 1)))
        return F.log_softmax(self.fc2(x), dim=1)


# 15 steps = the full batches of one epoch: drop_last=True would not change the default run.
def main(steps: int = 15, seed: int = 0) -> dict:
    torch.manual_seed(seed)
    device = xm.xla_device() if xm is not None else torch.device("cpu")

    train_loader = DataLoader(
        synthetic_mnist(NUM_IMAGES, seed=seed),
        batch_size=BATCH_SIZE,
        shuffle=True,
        generator=torch.Generator().manual_seed(seed),
    )
    model = MNIST().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.5)

    model.train()
    step = 0
    total_loss = 0.0
    for epoch in range(math.ceil(steps / len(train_loader))):
        for data, target in train_loader:
            if step >= steps:
                break
            data, target = data.to(device), target.to(device)
            optimizer.zero_grad()
            output = model(data)
            loss = F.nll_loss(output, target)
            loss.backward()
            optimizer.step()
            total_loss += loss.item()
            print(f"epoch {epoch} step {step} loss {total_loss / (step + 1):.4f}", file=sys.stderr)
            step += 1

    checksum = sum(p.detach().abs().sum() for p in model.parameters())
    return {
        "final_loss": loss.item(),
        "mean_loss": total_loss / max(step, 1),
        "param_checksum": float(checksum),
    }


if __name__ == "__main__":  # python train_x.py [steps]
    print(json.dumps(main(int(sys.argv[1])) if len(sys.argv) > 1 else main()))
