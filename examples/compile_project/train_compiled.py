"""Train a tiny sequence classifier with torch.compile, written the way a first port to
torch.compile often looks: it runs, and Dynamo splits and recompiles it all the time.

`fixed/train_compiled.py` is the same program after `xlalint fix --unsafe-fixes` and the hand fixes
the findings ask for. Run either on CPU (one JSON line of metrics on stdout):

    python examples/compile_project/train_compiled.py [steps] [backend]
"""

import json
import logging
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import DataLoader

logger = logging.getLogger(__name__)
VOCAB, CLASSES, DIM, BATCH = 50, 4, 32, 8
BACKEND = "eager"


class Classifier(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, DIM)
        self.head = torch.nn.Linear(DIM, CLASSES)
        self.calls = 0

    def forward(self, tokens):
        self.calls += 1
        h = self.embed(tokens)
        mask = tokens != 0
        pooled = (h * mask.unsqueeze(-1)).sum(1) / mask.sum(1, keepdim=True)
        return self.head(pooled)


def make_data(n, seed):
    g = torch.Generator().manual_seed(seed)
    data = []
    for i in range(n):
        length = 3 + (i // BATCH) % 9  # each batch its own length
        tokens = torch.randint(1, VOCAB, (length,), generator=g)
        data.append((tokens, torch.tensor(i % CLASSES)))
    return data


def collate(batch):
    tokens = pad_sequence([t for t, _ in batch], batch_first=True)
    return tokens, torch.stack([y for _, y in batch])


def compute_loss(logits, labels, step):
    t0 = time.perf_counter()
    logp = logits.log_softmax(-1)
    loss = -(F.one_hot(labels).float() * logp).sum(-1).mean()
    loss = loss * min(1.0, (step + 1) / 10)  # warm-up
    if loss > 5:
        logger.warning("loss spike at step %d", step)
    acc = (logp.argmax(-1) == labels).float().mean().item()
    print(f"step {step}: {time.perf_counter() - t0:.4f}s", file=sys.stderr)
    return loss, acc


def main(steps=36, seed=0, backend=BACKEND):
    torch.manual_seed(seed)
    model = Classifier()
    model.compile(backend=backend, dynamic=False)
    loss_step = torch.compile(compute_loss, backend=backend, dynamic=False)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    loader = DataLoader(make_data(steps * BATCH, seed), batch_size=BATCH, collate_fn=collate)
    losses, accs = [], []
    for step, (tokens, labels) in enumerate(loader):
        logits = model(tokens)
        loss, acc = loss_step(logits, labels, step)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.detach())
        accs.append(acc)
    return {"loss": float(torch.stack(losses).mean()), "acc": sum(accs) / len(accs)}


if __name__ == "__main__":
    args = sys.argv[1:]
    print(json.dumps(main(int(args[0]) if args else 36, backend=args[1] if len(args) > 1 else BACKEND)))
