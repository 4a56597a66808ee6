"""Train a tiny next-token language model (embedding + MLP head) on padded sequences.

Each replica trains on its own shard of the synthetic corpus.  Falls back to a
single CPU process when torch_xla is not installed.
"""
import json
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from data import PAD_ID, SyntheticTokenDataset, pad_collate  # noqa: E402

try:
    import torch_xla
    import torch_xla.core.xla_model as xm
except ImportError:  # CPU/GPU fallback so the script runs anywhere
    torch_xla = xm = None

VOCAB_SIZE = 512
EMBED_DIM = 32
BATCH_SIZE = 16


class TinyLM(nn.Module):
    def __init__(self, vocab_size=VOCAB_SIZE, dim=EMBED_DIM):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, dim, padding_idx=PAD_ID)
        self.proj = nn.Linear(dim, dim)
        self.head = nn.Linear(dim, vocab_size)

    def forward(self, input_ids):
        return self.head(torch.tanh(self.proj(self.embed(input_ids))))


def train(model, loader, sampler, optimizer, device, steps, max_norm=0.34, log_every=10):
    model.train()
    total_loss = torch.zeros((), device=device)
    position_sum = torch.zeros((), device=device)
    worst_seq_loss = torch.zeros((), device=device)
    seen_tokens = torch.zeros(VOCAB_SIZE, dtype=torch.bool, device=device)
    num_tokens = 0
    step, epoch = 0, 0
    while step < steps:
        sampler.set_epoch(epoch)
        for batch in loader:
            if step >= steps:
                break
            input_ids = batch["input_ids"].to(device)
            labels = batch["labels"].to(device)
            mask = labels != PAD_ID

            logits = model(input_ids)
            # keep logits finite for low-precision softmax
            logits[logits < -1e4] = -1e4
            token_loss = F.cross_entropy(
                logits.reshape(-1, VOCAB_SIZE), labels.reshape(-1), reduction="none"
            ).view_as(labels)
            loss = token_loss[mask].sum() / mask.sum()

            # data stats: where supervised tokens sit, which ids we have trained on
            valid = torch.nonzero(mask)
            position_sum += valid[:, 1].float().mean()
            ids = torch.unique(input_ids)
            seen_tokens[ids] = True
            seq_loss = torch.where(mask, token_loss, 0.0).sum(1) / mask.sum(1).clamp_min(1)
            worst_seq_loss = torch.maximum(worst_seq_loss, seq_loss.max().detach())

            optimizer.zero_grad()
            loss.backward()

            # clip the global gradient norm to max_norm
            total_norm = torch.norm(torch.stack([p.grad.norm(2) for p in model.parameters() if p.grad is not None]), 2)
            if total_norm > max_norm:
                for p in model.parameters():
                    if p.grad is not None:
                        p.grad.mul_(max_norm / (total_norm + 1e-6))
            optimizer.step()

            total_loss += loss.detach()
            num_tokens += mask.sum().item()  # noqa: XLA101 tokens/sec needs the exact count every step
            if step % log_every == 0:
                print(f"epoch {epoch} step {step} loss {loss.item():.4f} tokens {num_tokens}", file=sys.stderr)
            step += 1
        epoch += 1
    return loss, {
        "mean_loss": total_loss / step,
        "mean_position": position_sum / step,
        "worst_seq_loss": worst_seq_loss,
        "vocab_coverage": seen_tokens.float().mean(),
        "num_tokens": num_tokens,
    }


def main(steps: int = 30, seed: int = 0) -> dict:
    torch.manual_seed(seed)
    device = xm.xla_device() if xm is not None else torch.device("cpu")
    rank = xm.get_ordinal() if xm is not None else 0
    world_size = xm.xrt_world_size() if xm is not None else 1

    dataset = SyntheticTokenDataset(num_sequences=256, vocab_size=VOCAB_SIZE, seed=seed)
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=seed)
    loader = DataLoader(dataset, batch_size=BATCH_SIZE, sampler=sampler, collate_fn=pad_collate, drop_last=True)

    model = TinyLM().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    loss, stats = train(model, loader, sampler, optimizer, device, steps)

    result = {"final_loss": loss.item()}
    result.update({name: float(value) for name, value in stats.items()})
    result["param_checksum"] = float(sum(p.detach().abs().sum() for p in model.parameters()))
    return result


if __name__ == "__main__":  # python train_x.py [steps]
    print(json.dumps(main(int(sys.argv[1])) if len(sys.argv) > 1 else main()))
