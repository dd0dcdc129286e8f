"""The collective timer on a manual clock, and its hook on a real (one-process) DDP model."""

import pytest
import torch
import torch.distributed as dist
from torch import nn

from trainpace.dist.comm import CollectiveTimer, install


def test_the_cycle_splits_into_before_and_in_the_collective(clock):
    timer = CollectiveTimer(clock=clock)
    for before_s, exchange_s in ((0.5, 0.5), (0.03, 0.01), (0.05, 0.02)):
        clock.advance(before_s)
        timer.bucket_ready()
        clock.advance(exchange_s / 2)
        timer.bucket_ready()  # a later bucket of the same backward
        clock.advance(exchange_s / 2)
        timer.exchange_done()
    pre_s, comm_s, n = timer.take()
    assert n == 2  # the first iteration has no "before"
    assert pre_s == pytest.approx(0.08)
    assert comm_s == pytest.approx(0.03)
    assert timer.take() == (0.0, 0.0, 0)
    timer.exchange_done()  # no bucket seen: nothing counted
    assert timer.take() == (0.0, 0.0, 0)


@pytest.fixture
def one_process_group(tmp_path):
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    yield
    dist.destroy_process_group()


@pytest.mark.usefixtures("one_process_group")
def test_the_hook_times_a_real_ddp_backward():
    model = nn.parallel.DistributedDataParallel(nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 1)))
    timer = CollectiveTimer()
    assert install(model, timer)
    for _ in range(4):
        model(torch.randn(4, 8)).sum().backward()
    pre_s, comm_s, n = timer.take()
    assert n == 3 and pre_s > 0 and comm_s > 0
    assert all(p.grad is not None for p in model.parameters())  # the all-reduce still ran
    assert not install(model, CollectiveTimer())  # a second hook: refused, logged, no raise
