"""Two training threads, each with its own model and optimizer, inside their steps at the same
time (a barrier in every iteration after the first thread's first step)."""

import threading

import torch

STEPS = 30
together = threading.Barrier(2, timeout=30)
first_step_done = threading.Event()


def train(first_alone):
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

    def step(meet):
        loss = model(torch.randn(16, 8)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        if meet:
            together.wait()  # the other thread is inside its own step now
        optimizer.step()

    if first_alone:
        step(meet=False)
        first_step_done.set()
    for _ in range(STEPS):
        step(meet=True)


a = threading.Thread(target=train, args=(True,), name="learner-a")
a.start()
first_step_done.wait(30)
b = threading.Thread(target=train, args=(False,), name="learner-b")
b.start()
a.join()
b.join()
