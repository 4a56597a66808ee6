"""XLA203 helper-branch-in-step: Flags a per-step call of a function of another module of the
project that branches on a reduction of the device tensor it is given (`if torch.min(y) < -1.:`)
on every call."""

from __future__ import annotations

import ast

from xlalint.analysis.reads import argument_reads, read_cause
from xlalint.rule import Invalid, Rule, Valid


class HelperBranchInStep(Rule):
    """## What it does
    Flags a per-step call of a function of another module of the project that branches on a
    reduction of the device tensor it is given, on every call: `if torch.min(y) < -1.:`,
    `if mask.any():`, `while err.abs().max() > tol:` (a range check of audio, a guard for an
    empty mask, a convergence loop), itself or in a function of its module it hands the tensor to
    on every call (`masked_l1(pred, y, valid)` passing `valid` on to `masked_mean`). A helper in the same module is per step itself, and its branch
    is reported where it is, by XLA201.

    ## Why is this bad?
    Python's `if` needs a Python bool: the pending graph is compiled and run, and the reduction is
    copied to the host, every call. Inside the helper it looks harmless (it is also called on CPU
    tensors, in the dataset); the cost is at the call that hands it a device tensor every step, so
    that call is reported, with the line of the branch.

    ## Example
    ```python
    # audio.py
    def mel_spectrogram(y, n_fft):
        if torch.min(y) < -1.0:
            print("min value is", torch.min(y))
        return torch.stft(y, n_fft, return_complex=True).abs()

    # train.py
    from audio import mel_spectrogram

    for x, y in pl.MpDeviceLoader(loader, device):
        y_hat = generator(x)
        loss = F.l1_loss(mel_spectrogram(y_hat, 1024), mel_spectrogram(y, 1024))
    ```

    Use instead:
    ```python
    # audio.py: check on the host, where the data is loaded, or clamp on the device
    def mel_spectrogram(y, n_fft):
        y = y.clamp(-1.0, 1.0)
        return torch.stft(y, n_fft, return_complex=True).abs()
    ```
    """

    code, name, category = "XLA203", "helper-branch-in-step", "control_flow_on_tensor"
    evidence = ("step",)
    summary = (
        "`{helper}()` branches on the device tensor passed as `{param}` (an `{what}` at {where}): "
        "a host sync every step"
    )
    hint = "decide on the device (`torch.where`, `clamp`), check the data on the host before `.to(device)`, or every N steps"

    AUDIO = {
        "audio.py": """
        import torch

        def mel_spectrogram(y, n_fft, center=False):
            if torch.min(y) < -1.0:
                print("min value is", torch.min(y))
            if y.dim() == 1:  # metadata: no read
                y = y.unsqueeze(0)
            return torch.stft(y, n_fft, center=center, return_complex=True).abs()

        def normalize(y, peak=None):
            if peak is None:
                peak = y.abs().max()
            return y / peak

        def masked_mean(x, mask):
            if not mask.any():
                return x.new_zeros(())
            return x[mask].mean()

        def masked_l1(pred, target, valid):
            return masked_mean((pred - target).abs(), valid.bool())
        """
    }

    VALID = [
        Valid(
            """
            from audio import mel_spectrogram

            class MelDataset(torch.utils.data.Dataset):
                def __getitem__(self, i):
                    audio = torch.from_numpy(self.clips[i])  # a CPU tensor
                    return audio, mel_spectrogram(audio, 1024)

            for x, y in loader:  # a plain DataLoader: host tensors
                mel = mel_spectrogram(y, 1024)
                x, mel = x.to(device), mel.to(device)
                loss_fn(model(x), mel).backward()
                optimizer.step()
            """,
            modules=AUDIO,
        ),
        Valid(
            """
            from audio import normalize

            for x, y in pl.MpDeviceLoader(loader, device):
                loss = loss_fn(model(x), normalize(y))  # the branch tests `peak`, not the tensor
                loss.backward()
                xm.optimizer_step(optimizer)
            """,
            modules=AUDIO,
        ),
        Valid(
            """
            def clipped(y):  # the branch is reported here, by XLA201
                if torch.min(y) < -1.0:
                    y = y.clamp(-1.0, 1.0)
                return y

            for x, y in pl.MpDeviceLoader(loader, device):
                loss = loss_fn(model(x), clipped(y))
                loss.backward()
                xm.optimizer_step(optimizer)
            """
        ),
        Valid(
            """
            from audio import mel_spectrogram

            for step, (x, y) in enumerate(pl.MpDeviceLoader(loader, device)):
                y_hat = generator(x)
                loss_fn(y_hat, y).backward()
                xm.optimizer_step(optimizer)
                if step % 1000 == 0:  # every N steps
                    writer.add_image("mel", mel_spectrogram(y_hat.squeeze(1), 1024), step)
            """,
            modules=AUDIO,
        ),
    ]
    INVALID = [
        Invalid(
            """
            from audio import masked_l1

            for x, y, valid in pl.MpDeviceLoader(loader, device):
                loss = masked_l1(model(x), y, valid)  # hands `valid` to `masked_mean`, which branches on it
                loss.backward()
                xm.optimizer_step(optimizer)
            """,
            line=4,
            modules=AUDIO,
        ),
        Invalid(
            """
            from audio import mel_spectrogram

            for x, mel in pl.MpDeviceLoader(loader, device):
                y_hat = generator(x)
                loss = F.l1_loss(mel_spectrogram(y_hat.squeeze(1), 1024), mel)
                loss.backward()
                xm.optimizer_step(optimizer)
            """,
            line=5,
            modules=AUDIO,
        ),
        Invalid(
            """
            from audio import masked_mean

            class Model(nn.Module):
                def forward(self, x, lengths):
                    h = self.encoder(x)
                    mask = lengths[:, None] > torch.arange(h.shape[1], device=h.device)
                    return masked_mean(h, mask)
            """,
            line=7,
            modules=AUDIO,
        ),
    ]

    def visit_Call(self, node: ast.Call) -> None:
        for helper, where, read, value in argument_reads(self.ctx, node, through="", branches=True):
            if self.ctx.on_device(value) and self.ctx.runs_hot(node):
                self.report(
                    node,
                    self.summary.format(helper=helper, param=read.param, what=read.what, where=where),
                    cause=read_cause(self.ctx, node, read),
                )
                return
