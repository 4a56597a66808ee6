"""Small realistic code samples shared by tests."""

import textwrap

TRAIN_LOOP = textwrap.dedent(
    """\
    import torch


    def train(model, loader, optimizer, loss_fn):
        total = 0.0
        for x, y in loader:
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            total += loss.item()
        return total
    """
)
