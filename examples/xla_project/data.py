"""Synthetic datasets and a padding collate function shared by the training scripts.

Everything in this module runs on the host (in the main process or in DataLoader
workers) before a batch is moved to the accelerator, so plain CPU tensor code is fine.
"""
import torch
from torch.utils.data import Dataset

PAD_ID = 0
BOS_ID = 1
MAX_LENGTH = 24  # every LM batch is padded to this length, so the step sees one shape


class SyntheticTokenDataset(Dataset):
    """Variable-length token sequences that follow a noisy deterministic rule.

    token[t + 1] = (3 * token[t] + 1) mod (vocab_size - 2) + 2, with a random token
    every so often, so a tiny LM has something to learn.
    """

    def __init__(self, num_sequences, vocab_size, min_length=8, max_length=MAX_LENGTH, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.vocab_size = vocab_size
        self.lengths = torch.randint(min_length, max_length + 1, (num_sequences,), generator=g)
        self.tokens = torch.full((num_sequences, max_length + 1), PAD_ID, dtype=torch.long)
        starts = torch.randint(2, vocab_size, (num_sequences,), generator=g)
        noise = torch.rand(num_sequences, max_length + 1, generator=g)
        random_tokens = torch.randint(2, vocab_size, (num_sequences, max_length + 1), generator=g)
        for i in range(num_sequences):
            token = int(starts[i])
            row = [BOS_ID]
            for t in range(int(self.lengths[i])):
                row.append(token)
                if noise[i, t] < 0.1:
                    token = int(random_tokens[i, t])
                else:
                    token = (3 * token + 1) % (vocab_size - 2) + 2
            self.tokens[i, : len(row)] = torch.tensor(row)

    def __len__(self):
        return self.tokens.shape[0]

    def __getitem__(self, idx):
        # +1 for the BOS token; the stored row is padded past this point
        length = self.lengths[idx].item() + 1
        return {"tokens": self.tokens[idx, :length]}


def pad_collate(batch, max_length=MAX_LENGTH, pad_id=PAD_ID):
    """Shift each sequence into (input_ids, labels) and pad both to a fixed max_length."""
    input_ids = torch.full((len(batch), max_length), pad_id, dtype=torch.long)
    labels = torch.full((len(batch), max_length), pad_id, dtype=torch.long)
    for row, example in enumerate(batch):
        tokens = example["tokens"].tolist()[: max_length + 1]
        n = len(tokens) - 1
        input_ids[row, :n] = torch.tensor(tokens[:-1])
        labels[row, :n] = torch.tensor(tokens[1:])
    return {"input_ids": input_ids, "labels": labels}


class SyntheticImageDataset(Dataset):
    """Single-channel noisy images with a bright 3x3 patch whose position is the label."""

    def __init__(self, num_samples, image_size=12, num_classes=10, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.image_size = image_size
        self.patches_per_row = image_size // 3
        assert num_classes <= self.patches_per_row**2, "not enough patch positions"
        self.labels = torch.randint(0, num_classes, (num_samples,), generator=g)
        self.noise = torch.randn(num_samples, 1, image_size, image_size, generator=g) * 0.3

    def __len__(self):
        return self.labels.shape[0]

    def __getitem__(self, idx):
        label = int(self.labels[idx])
        row, col = divmod(label, self.patches_per_row)
        image = self.noise[idx].clone()
        image[0, 3 * row : 3 * row + 3, 3 * col : 3 * col + 3] += 1.0
        return image, label
