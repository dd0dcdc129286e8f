"""A real Lightning fit of a tiny model on the real clock, with an independent timer of its
training iterations: imported by the tests for one process, run as a script for DDP
(``python lightning_fit.py OUT DEVICES``; Lightning's ``ddp`` strategy starts the other
ranks by running this same command again).

Each rank writes ``OUT/truth{rank}.json``: its samples and the wall time of its training
iterations past the warm-up, from the first measured batch's ``on_train_batch_start`` to
``on_train_end`` (no validation, no checkpoint: every second of it is training), timed by a
callback of its own.
"""

from __future__ import annotations

import json
import sys
import time
import warnings
from pathlib import Path

import torch
from lightning import pytorch as pl
from torch.utils.data import DataLoader, TensorDataset

from trainpace.integrations.lightning import TrainpaceCallback

BATCH = 8
# per rank: 1,390 measured steps of about 0.7 ms in one process, about 1 s; a span of 0.08 s
# (110 steps) is one that a few milliseconds of machine noise at either end move by several
# percent, past the tests' 2% bound
BATCHES = 1400
WARMUP = 10
WINDOW = 20


class Tiny(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(),
                                       torch.nn.Linear(64, 1))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.log("train/loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


class Iterations(pl.Callback):
    """Independent timer: when each batch's work began, and when training ended."""

    def __init__(self) -> None:
        self.starts: list[float] = []
        self.samples: list[int] = []
        self.end: float | None = None

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.starts.append(time.perf_counter())
        self.samples.append(int(batch[0].shape[0]))

    def on_train_end(self, trainer, pl_module):
        self.end = time.perf_counter()

    def truth(self) -> dict[str, float]:
        assert self.end is not None
        return {"samples": sum(self.samples[WARMUP:]), "seconds": self.end - self.starts[WARMUP],
                "batches": len(self.starts)}


def fit(out: Path, devices: int = 1) -> tuple[TrainpaceCallback, Iterations, pl.Trainer]:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    n = BATCHES * BATCH * devices
    data = TensorDataset(torch.randn(n, 32), torch.randn(n, 1))
    callback = TrainpaceCallback(out / "run", window=WINDOW, warmup=WARMUP, console=False,
                                 report=False, count_flops=False)
    timer = Iterations()
    trainer = pl.Trainer(
        accelerator="cpu", devices=devices, strategy="ddp" if devices > 1 else "auto",
        max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, limit_val_batches=0, num_sanity_val_steps=0,
        callbacks=[timer, callback], default_root_dir=out)  # the timer ends before trainpace finishes
    trainer.fit(Tiny(), DataLoader(data, batch_size=BATCH))
    (out / f"truth{trainer.global_rank}.json").write_text(json.dumps(timer.truth()))
    return callback, timer, trainer


if __name__ == "__main__":
    warnings.simplefilter("ignore")
    fit(Path(sys.argv[1]), int(sys.argv[2]))
