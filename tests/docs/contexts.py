"""What a documentation example may take as given, named by ``<!-- test-context: NAME -->``.

An example in the docs is a fragment of a user's program: ``model``, ``train_loader`` or a
run folder are theirs. A context supplies a small stand-in (tiny models, random data), so the
fragment runs as it is written. ``PRELUDES`` are put before a Python example's code; ``SETUPS``
are Python scripts run in the example's folder before it (Python or shell).
"""

from __future__ import annotations

LOOP = '''
import types

import torch
from torch.utils.data import DataLoader, TensorDataset

import trainpace

torch.manual_seed(0)


class _TinyModel(torch.nn.Module):
    """Returns an object with a ``.loss``, as Hugging Face models do."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(8, 2)

    def forward(self, batch):
        inputs, labels = batch
        loss = torch.nn.functional.cross_entropy(self.layer(inputs), labels)
        return types.SimpleNamespace(loss=loss)


model = _TinyModel()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
train_loader = DataLoader(TensorDataset(torch.randn(256, 8), torch.randint(0, 2, (256,))),
                          batch_size=16)
'''

LIGHTNING = '''
import torch
from torch.utils.data import DataLoader, TensorDataset
from lightning import LightningModule, Trainer as _Trainer


class _TinyModule(LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(8, 2)

    def training_step(self, batch, batch_idx):
        inputs, labels = batch
        return torch.nn.functional.cross_entropy(self.layer(inputs), labels)

    def validation_step(self, batch, batch_idx):
        inputs, labels = batch
        self.log("val_loss", torch.nn.functional.cross_entropy(self.layer(inputs), labels))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def Trainer(**kwargs):  # the user's Trainer, kept small and quiet for the test
    return _Trainer(max_epochs=1, logger=False, enable_checkpointing=False,
                    enable_progress_bar=False, enable_model_summary=False,
                    accelerator="cpu", **kwargs)


model = _TinyModule()
_data = TensorDataset(torch.randn(128, 8), torch.randint(0, 2, (128,)))
train_loader = DataLoader(_data, batch_size=16)
val_loader = DataLoader(_data, batch_size=32)
'''

HUGGINGFACE = '''
import torch
import transformers

torch.manual_seed(0)


class _Data(torch.utils.data.Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        ids = torch.randint(1, 50, (12,))
        return {"input_ids": ids, "attention_mask": torch.ones(12, dtype=torch.long),
                "labels": ids.clone()}


model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
    vocab_size=50, n_positions=16, n_embd=16, n_layer=1, n_head=2))
args = transformers.TrainingArguments(output_dir="hf-out", max_steps=12,
                                      per_device_train_batch_size=8, report_to=[],
                                      use_cpu=True, logging_steps=4, save_strategy="no",
                                      eval_strategy="no", disable_tqdm=True)
train, dev = _Data(), _Data()
'''

PRELUDES: dict[str, str] = {"loop": LOOP, "lightning": LIGHTNING, "huggingface": HUGGINGFACE}

RUNS = '''
import torch

import trainpace

for name, batch in (("exp1", 16), ("exp2", 32), ("bs32", 32), ("bs128", 128)):
    meter = trainpace.Meter(out=f"runs/{name}", window=10, console=False, report=False,
                            sample_interval_s=0.05, count_flops=False)
    weight = torch.zeros(8, requires_grad=True)
    data = torch.randn(60 * batch, 8)
    for i in meter.loader(range(60)):
        with meter.step(data[i * batch:(i + 1) * batch]):
            loss = (data[i * batch:(i + 1) * batch] @ weight - 1).pow(2).mean()
            loss.backward()
            with torch.no_grad():
                weight -= 0.05 * weight.grad
                weight.grad = None
            meter.observe(loss=loss)
    meter.finish()
'''

_SCRIPT = '''
import argparse

import torch
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=1)
parser.add_argument("--lr", type=float, default=0.1)
args = parser.parse_args()
torch.manual_seed(0)
loader = DataLoader(TensorDataset(torch.randn(320, 8), torch.randint(0, 2, (320,))),
                    batch_size=16)
model = torch.nn.Linear(8, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
for epoch in range(args.epochs):
    for inputs, labels in loader:
        loss = torch.nn.functional.cross_entropy(model(inputs), labels)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
print("trained", args.epochs, "epochs")
'''

_DATA = '''
import torch
from torch.utils.data import DataLoader, TensorDataset


def make_dataset():
    return TensorDataset(torch.randn(512, 8), torch.randint(0, 2, (512,)))


def make_loader():
    return DataLoader(make_dataset(), batch_size=16)
'''

SCRIPT = f'''
from pathlib import Path

Path("mypkg").mkdir(exist_ok=True)
Path("mypkg/__init__.py").write_text("")
Path("train.py").write_text({_SCRIPT!r})
Path("mypkg/train.py").write_text({_SCRIPT!r})
Path("data.py").write_text({_DATA!r})
Path("mypkg/data.py").write_text({_DATA!r})
'''

TRACES = '''
import os
import shutil
from pathlib import Path

source = Path(os.environ["TRAINPACE_REPO"]) / "tests" / "data" / "traces"
Path("traces").mkdir()
for rank in (0, 1):
    shutil.copy(source / f"sampled_rank-{rank}.json.gz", f"traces/rank{rank}.json.gz")
    shutil.copy(source / f"sampled_rank-{rank}.json.gz", f"rank{rank}.pt.trace.json.gz")
shutil.copy(source / "sampled_rank-0.json.gz", "rank0.json.gz")
shutil.copytree(source / "cpu_run", "runs/exp1")
Path("tests/data/traces").mkdir(parents=True)
shutil.copytree(source / "cpu_run", "tests/data/traces/cpu_run")
'''

SETUPS: dict[str, str] = {"runs": RUNS, "script": SCRIPT, "traces": TRACES}
