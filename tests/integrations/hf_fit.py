"""A real HF Trainer run of a tiny GPT-2 (built from a config) on the real clock, with an
independent timer of its steps: run by ``torchrun --nproc_per_node=2 hf_fit.py OUT`` for
DDP on CPU processes (gloo).

Each rank writes ``OUT/truth{rank}.json``: its samples and the wall time of its steps past the
warm-up, from the first measured step's ``on_step_begin`` to ``on_train_end`` (no evaluation,
no save: every second of it is training), timed by a callback of its own placed before
trainpace's.
"""

from __future__ import annotations

import json
import sys
import time
import warnings
from pathlib import Path

import torch
import transformers

from trainpace.integrations.huggingface import TrainpaceCallback

BATCH = 4
# steps of about 8 ms: 145 measured (about 1.2 s), so that the few milliseconds a busy 2-core
# machine may add at either end of the span stay well inside the test's 2%
STEPS = 150
WARMUP = 5
LENGTH = 16


class Ids(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 4 * STEPS * BATCH

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        ids = torch.randint(1, 60, (LENGTH,), generator=torch.Generator().manual_seed(i))
        return {"input_ids": ids, "attention_mask": torch.ones(LENGTH, dtype=torch.long),
                "labels": ids.clone()}


class Timer(transformers.TrainerCallback):
    def __init__(self) -> None:
        self.begins: list[float] = []
        self.end: float | None = None

    def on_step_begin(self, args, state, control, **kwargs):
        self.begins.append(time.perf_counter())

    def on_train_end(self, args, state, control, **kwargs):
        self.end = time.perf_counter()


def main(out: Path) -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    config = transformers.GPT2Config(vocab_size=64, n_positions=32, n_embd=32, n_layer=1,
                                     n_head=2)
    args = transformers.TrainingArguments(
        output_dir=str(out / "hf"), per_device_train_batch_size=BATCH, max_steps=STEPS,
        logging_steps=5, save_strategy="no", report_to="none", use_cpu=True,
        dataloader_num_workers=0, disable_tqdm=True)
    timer = Timer()
    trainer = transformers.Trainer(
        model=transformers.GPT2LMHeadModel(config), args=args, train_dataset=Ids(),
        callbacks=[timer, TrainpaceCallback(out / "run", window=10, warmup=WARMUP,
                                            console=False, report=False, count_flops=False)])
    trainer.train()
    assert timer.end is not None
    truth = {"samples": BATCH * (STEPS - WARMUP), "seconds": timer.end - timer.begins[WARMUP]}
    (out / f"truth{args.process_index}.json").write_text(json.dumps(truth))


if __name__ == "__main__":
    warnings.simplefilter("ignore")
    main(Path(sys.argv[1]))
