"""A plain training loop: a DataLoader, a model, an optimizer; nothing of trainpace."""

import argparse
import os
import sys
import time

import torch
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=40)
parser.add_argument("--batch", type=int, default=8)
parser.add_argument("--sleep-ms", type=float, default=0.0, help="extra time per step")
parser.add_argument("--print-every", type=int, default=0)
parser.add_argument("--learnable", action="store_true",
                    help="labels that follow from the inputs: the loss falls (an ETA to a target)")
parser.add_argument("--hold-at", type=int, default=0, help="after this step, wait for --until")
parser.add_argument("--until", help="a file whose existence ends the hold")
args = parser.parse_args()

print(f"argv {sys.argv[1:]} path0 {sys.path[0]} name {__name__}", flush=True)
torch.manual_seed(0)
inputs = torch.randn(args.steps * args.batch, 16)
labels = inputs[:, :4].argmax(1) if args.learnable else torch.randint(0, 4, (len(inputs),))
data = TensorDataset(inputs, labels)
loader = DataLoader(data, batch_size=args.batch, shuffle=True)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step, (x, y) in enumerate(loader, start=1):
    loss = torch.nn.functional.cross_entropy(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if args.sleep_ms:
        time.sleep(args.sleep_ms / 1000)
    if args.print_every and step % args.print_every == 0:
        print(f"script: step {step} loss {loss.item():.3f}", flush=True)
    if step == args.hold_at:  # mid-run for as long as an observer needs (at most a minute)
        deadline = time.monotonic() + 60
        while not os.path.exists(args.until) and time.monotonic() < deadline:
            time.sleep(0.05)
print("script: done", flush=True)
