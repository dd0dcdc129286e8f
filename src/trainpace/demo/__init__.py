"""The demo: a small, real training run on the CPU, instrumented with the Meter.

A tiny character-level transformer learns to continue *Macbeth* (William Shakespeare, public
domain), fed by a real ``DataLoader`` whose worker count and per-sample delay are knobs, so the
data-loading bottleneck can be made to appear and disappear.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, TextIO

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from trainpace.config import is_int_at_least
from trainpace.errors import ConfigError
from trainpace.meter import Meter
from trainpace.summary import Summary

TEXT_FILE = "macbeth.txt"


def load_text() -> str:
    """The bundled public-domain text."""
    return resources.files(__package__).joinpath(TEXT_FILE).read_text(encoding="utf-8")


class CharDataset(Dataset[dict[str, torch.Tensor]]):
    """Windows of ``seq_len`` characters; the labels are the next characters.

    ``delay_s`` is slept in every ``__getitem__``: a stand-in for slow decoding or
    augmentation, paid by the DataLoader workers (or the main process with 0 workers).
    """

    def __init__(self, text: str, seq_len: int, delay_s: float = 0.0) -> None:
        self.vocab = sorted(set(text))
        index = {ch: i for i, ch in enumerate(self.vocab)}
        self.data = torch.tensor([index[ch] for ch in text], dtype=torch.long)
        self.seq_len = seq_len
        self.delay_s = delay_s

    def __len__(self) -> int:
        return len(self.data) - self.seq_len - 1

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        if self.delay_s > 0:
            time.sleep(self.delay_s)
        chunk = self.data[i : i + self.seq_len + 1]
        return {"input_ids": chunk[:-1], "labels": chunk[1:]}


class TinyGPT(nn.Module):
    """A small decoder-only transformer (pre-norm, causal self-attention)."""

    def __init__(self, vocab_size: int, seq_len: int, width: int = 64, layers: int = 2,
                 heads: int = 4) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab_size, width)
        self.position = nn.Parameter(torch.zeros(seq_len, width))
        block = nn.TransformerEncoderLayer(width, heads, dim_feedforward=4 * width, dropout=0.0,
                                           batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab_size)
        self.causal_mask: torch.Tensor
        mask = torch.triu(torch.full((seq_len, seq_len), float("-inf")), diagonal=1)
        self.register_buffer("causal_mask", mask, persistent=False)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        length = input_ids.shape[1]
        x = self.embed(input_ids) + self.position[:length]
        x = self.blocks(x, mask=self.causal_mask[:length, :length], is_causal=True)
        logits: torch.Tensor = self.head(self.norm(x))
        return logits


@dataclass(frozen=True, kw_only=True)
class DemoSettings:
    """The demo's knobs (the CLI's flags)."""

    steps: int = 300
    workers: int = 0
    slow_data_ms: float = 0.0
    batch_size: int = 32
    seq_len: int = 64
    learning_rate: float = 3e-3
    target_loss: float = 2.4
    seed: int = 0

    def __post_init__(self) -> None:
        checks = (
            ("steps", self.steps, is_int_at_least(self.steps, 1), ">= 1"),
            ("workers", self.workers, is_int_at_least(self.workers, 0), ">= 0"),
            ("slow_data_ms", self.slow_data_ms,
             math.isfinite(self.slow_data_ms) and self.slow_data_ms >= 0, ">= 0"),
            ("batch_size", self.batch_size, is_int_at_least(self.batch_size, 1), ">= 1"),
        )
        for key, value, ok, constraint in checks:
            if not ok:
                raise ConfigError(key, value, f"must be {constraint}")


def run_demo(settings: DemoSettings, *, out: str | Path | None = None, window: int = 25,
             stream: TextIO | None = None, console: bool = True, report: bool = True,
             **meter_options: Any) -> tuple[Summary, Path | None]:
    """Train the tiny transformer for ``settings.steps`` steps under a Meter.

    Returns the summary and the run folder written (None without ``out``).
    """
    torch.manual_seed(settings.seed)
    dataset = CharDataset(load_text(), settings.seq_len, settings.slow_data_ms / 1000.0)
    loader = DataLoader(
        dataset,
        batch_size=settings.batch_size,
        shuffle=True,
        num_workers=settings.workers,
        persistent_workers=settings.workers > 0,
        generator=torch.Generator().manual_seed(settings.seed),
        drop_last=True,
    )
    model = TinyGPT(len(dataset.vocab), settings.seq_len)
    optimizer = torch.optim.AdamW(model.parameters(), lr=settings.learning_rate)
    loss_fn = nn.CrossEntropyLoss()
    meter = Meter(out, window=window, target_loss=settings.target_loss, stream=stream,
                  console=console, report=report, made_by="demo", **meter_options)
    step = 0
    while step < settings.steps:
        for batch in meter.loader(loader):
            with meter.step(batch):
                logits = model(batch["input_ids"])
                loss = loss_fn(logits.flatten(0, 1), batch["labels"].flatten())
                loss.backward()
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                meter.observe(loss=loss)
            step += 1
            if step >= settings.steps:
                break
    return meter.finish(), meter.path
