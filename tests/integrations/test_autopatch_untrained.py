"""AutoPatch: a batch fetched and never trained on (``next(iter(loader))`` to read the batch
size, as pytorch/examples' DDP tutorial does at each epoch's start) is not counted; its wait
stays in the step. In-process, on a manual clock, so the truth is exact."""


import pytest
import torch
from clocked_loop import BATCH, WAIT_S, Timed, meter_for, model_and_optimizer, rows_of
from torch.utils.data import DataLoader

from trainpace.integrations.autopatch import AutoPatch

BATCHES = 6  # per epoch
COMPUTE_S = 0.006  # forward and backward, per micro-batch
TAIL_S = 0.004  # after optimizer.step()
FETCH_S = BATCH * WAIT_S  # one batch's wait


def loader_of(clock, batches=BATCHES):
    return DataLoader(Timed(clock, batches * BATCH), batch_size=BATCH)


def backward(clock, model, x, y):
    clock.advance(COMPUTE_S)
    torch.nn.functional.mse_loss(model(x), y).backward()


def finish_step(clock, optimizer):
    optimizer.step()
    optimizer.zero_grad()
    clock.advance(TAIL_S)


def test_the_tutorials_batch_size_peek_is_not_counted_its_wait_is_the_steps(tmp_path, clock):
    meter = meter_for(tmp_path, "tutorial", clock)
    with AutoPatch(meter):
        model, optimizer = model_and_optimizer()
        loader = loader_of(clock)
        for _ in range(3):
            batch_size = len(next(iter(loader))[0])  # the tutorial's print of the batch size
            assert batch_size == BATCH
            for x, y in loader:
                backward(clock, model, x, y)
                finish_step(clock, optimizer)
    summary = meter.finish()
    rows = rows_of(meter)
    assert len(rows) == 3 * BATCHES
    assert [r["samples"] for r in rows] == [BATCH] * len(rows)
    assert [r["micro_batches"] for r in rows] == [1] * len(rows)
    # The first step of each epoch waited for the peeked batch too: the loop's time.
    firsts = {1, 1 + BATCHES, 1 + 2 * BATCHES}
    step_s = FETCH_S + COMPUTE_S + TAIL_S
    assert [r["step_s"] for r in rows] == pytest.approx(
        [step_s + FETCH_S if r["step"] in firsts else step_s for r in rows])
    assert [r["wait_s"] for r in rows] == pytest.approx(
        [2 * FETCH_S if r["step"] in firsts else FETCH_S for r in rows])
    assert summary.steps.total == 3 * BATCHES


@pytest.mark.parametrize("peek", [False, True])
def test_accumulation_across_an_epoch_boundary_counts_both_batches(tmp_path, clock, peek):
    # 3 batches an epoch, 2 per optimizer step: the second step takes the last batch of
    # epoch 1 (its backward() done) and the first of epoch 2.
    meter = meter_for(tmp_path, f"across{peek}", clock)
    with AutoPatch(meter):
        model, optimizer = model_and_optimizer()
        loader = loader_of(clock, batches=3)
        micro = 0
        for _ in range(2):
            if peek:
                next(iter(loader))
            for x, y in loader:
                backward(clock, model, x, y)
                micro += 1
                if micro % 2 == 0:
                    finish_step(clock, optimizer)
    meter.finish()
    rows = rows_of(meter)
    assert [r["samples"] for r in rows] == [2 * BATCH] * 3
    assert [r["micro_batches"] for r in rows] == [2] * 3
    peeked = FETCH_S if peek else 0.0  # epoch 2's peek: inside step 2, epoch 1's in step 1
    assert [r["wait_s"] for r in rows] == pytest.approx(
        [2 * FETCH_S + peeked, 2 * FETCH_S + peeked, 2 * FETCH_S])


def test_two_loaders_feeding_one_step_count_both_the_peek_of_either_not(tmp_path, clock):
    meter = meter_for(tmp_path, "paired", clock)
    with AutoPatch(meter):
        model, optimizer = model_and_optimizer()
        first, second = loader_of(clock), loader_of(clock)
        for epoch in range(2):
            next(iter(first if epoch == 0 else second))  # a peek at one of them
            for (x, y), (x2, y2) in zip(first, second, strict=True):
                backward(clock, model, torch.cat([x, x2]), torch.cat([y, y2]))
                finish_step(clock, optimizer)
    meter.finish()
    rows = rows_of(meter)
    assert len(rows) == 2 * BATCHES
    assert [r["samples"] for r in rows] == [2 * BATCH] * len(rows)
    assert [r["micro_batches"] for r in rows] == [2] * len(rows)


def test_a_batch_from_another_loader_each_step_is_counted(tmp_path, clock):
    # A fresh iterator of a second loader per step (its batch trained on): not a peek.
    meter = meter_for(tmp_path, "second", clock)
    with AutoPatch(meter):
        model, optimizer = model_and_optimizer()
        first, second = loader_of(clock), loader_of(clock, batches=1)
        for x, y in first:
            x2, y2 = next(iter(second))
            backward(clock, model, torch.cat([x, x2]), torch.cat([y, y2]))
            finish_step(clock, optimizer)
    meter.finish()
    rows = rows_of(meter)
    assert [r["samples"] for r in rows] == [2 * BATCH] * BATCHES
    assert [r["micro_batches"] for r in rows] == [2] * BATCHES
