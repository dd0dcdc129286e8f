"""Updates its weights by hand (no torch.optim): each backward() ends a step under run.

Prints the first iteration after which no dispatch mode (trainpace's FLOP counter) was on.
"""

import sys

import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

ITERATIONS = int(sys.argv[1]) if len(sys.argv) > 1 else 30

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
x, y = torch.randn(16, 8), torch.randn(16, 1)
off_at = None
for iteration in range(1, ITERATIONS + 1):
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            p -= 0.01 * p.grad
            p.grad = None
    if off_at is None and not _get_current_dispatch_mode_stack():
        off_at = iteration
modes = _get_current_dispatch_mode_stack()
print(f"script: iterations {ITERATIONS} counting off at {off_at} modes {len(modes)}", flush=True)
