"""Updates its weights by hand (no torch.optim): no optimizer step ever ends a step.

Trains until no dispatch mode (trainpace's FLOP counter) is left on, then 20 more
iterations; gives up after 60 s of its own CPU time.
"""

import time

import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
x, y = torch.randn(16, 8), torch.randn(16, 1)
iteration, off_at = 0, None
while time.thread_time() < 60:
    iteration += 1
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            p -= 0.01 * p.grad
            p.grad = None
    if off_at is None and not _get_current_dispatch_mode_stack():
        off_at = iteration
    if off_at is not None and iteration == off_at + 20:
        break
modes = _get_current_dispatch_mode_stack()
print(f"script: iterations {iteration} counting off at {off_at} modes {len(modes)}", flush=True)
