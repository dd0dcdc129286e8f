"""Edge cases of a script under ``trainpace run``: --where says which one.

- train: a few steps (--steps); any other value fails the script's own argument parsing
  (exit 2) before any training;
- backward: an error raised inside backward();
- dataset: an error raised in a Dataset's __getitem__;
- swallow: trains in a retry loop whose bare ``except:`` swallows everything (SIGTERM
  included), writing the file named by --flag after 20 steps;
- workers: trains for good from a DataLoader with 2 worker processes, writing the file named
  by --flag after 20 steps.
"""

import argparse
import sys
import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--where", required=True, choices=["train", "backward", "dataset", "swallow", "workers"])
parser.add_argument("--flag")
parser.add_argument("--api-key")
parser.add_argument("--steps", type=int, default=0)
args = parser.parse_args()
print(f"script: argv0 {sys.argv[0]}", flush=True)


class Fails(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        raise ArithmeticError("raised in backward")


class BadData(Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, index):
        if index == 5:
            raise LookupError("raised in the dataset")
        return torch.randn(4)


model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)


def train(loader, steps=None):
    for done, batch in enumerate(loader, start=1):
        x = batch[0] if isinstance(batch, list) else batch
        out = model(x).pow(2).mean()
        if args.where == "backward" and done == 4:
            out = Fails.apply(out)
        out.backward()
        optimizer.step()
        optimizer.zero_grad()
        if steps is not None and done == steps:
            return


if args.where == "dataset":
    train(DataLoader(BadData(), batch_size=2))
elif args.where == "backward":
    train(DataLoader(TensorDataset(torch.randn(32, 4)), batch_size=4))
elif args.where == "swallow":
    loader = DataLoader(TensorDataset(torch.randn(16, 4)), batch_size=4)
    step = 0
    while True:
        try:
            for (x,) in loader:
                model(x).pow(2).mean().backward()
                optimizer.step()
                optimizer.zero_grad()
                step += 1
                time.sleep(0.002)
                if step == 20:
                    Path(args.flag).write_text("20 steps")
        except:  # noqa: E722 - the pattern under test: a retry loop that swallows everything
            print("script: retrying", flush=True)
elif args.where == "workers":
    loader = DataLoader(TensorDataset(torch.randn(64, 4)), batch_size=4, num_workers=2)
    step = 0
    while True:
        for (x,) in loader:
            model(x).pow(2).mean().backward()
            optimizer.step()
            optimizer.zero_grad()
            step += 1
            if step == 20:
                Path(args.flag).write_text("20 steps")
else:
    train(DataLoader(TensorDataset(torch.randn(32, 4)), batch_size=4), steps=args.steps)
