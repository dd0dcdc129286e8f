"""AutoPatch: where a step ends, and the loss under a GradScaler (in-process, on a manual clock,
so the truth is exact).

What the loop does after ``optimizer.step()`` is the step's; an evaluation between epochs, or
between steps on its own loader, is outside the steps; the loss kept is the one before
``GradScaler.scale``.
"""


import pytest
import torch
from clocked_loop import BATCH, WAIT_S, Timed, meter_for, model_and_optimizer, rows_of
from torch.utils.data import DataLoader

from trainpace.integrations.autopatch import AutoPatch

pytestmark = pytest.mark.usefixtures("without_host_readings")

COMPUTE_S = 0.006  # forward and backward
TAIL_S = 0.004  # after optimizer.step(): zero_grad(), a print
EVAL_S = 0.25  # one evaluation


def evaluate(model, clock):
    """An evaluation on its own loader, under no_grad: EVAL_S in all (its data costs none)."""
    with torch.no_grad():
        for x, _ in DataLoader(Timed(clock, 2 * BATCH, wait_s=0.0), batch_size=BATCH):
            model(x)
    clock.advance(EVAL_S)


def train(clock, model, optimizer, loader, *, eval_every=0):
    for i, (x, y) in enumerate(loader):
        clock.advance(COMPUTE_S)
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()
        clock.advance(TAIL_S)
        if eval_every and (i + 1) % eval_every == 0:
            evaluate(model, clock)


STEP_S = BATCH * WAIT_S + COMPUTE_S + TAIL_S


def test_the_time_after_the_optimizer_step_is_the_steps_evaluation_between_epochs_outside(
        tmp_path, clock):
    meter = meter_for(tmp_path, "epochs", clock)
    with AutoPatch(meter):
        model, optimizer = model_and_optimizer()
        loader = DataLoader(Timed(clock, 6 * BATCH), batch_size=BATCH)
        for _ in range(3):
            train(clock, model, optimizer, loader)
            evaluate(model, clock)
    summary = meter.finish()
    rows = rows_of(meter)
    assert len(rows) == 18
    assert [r["step_s"] for r in rows] == pytest.approx([STEP_S] * 18)
    # The evaluation after epochs 1 and 2 is outside the first step of the next epoch; the
    # last one comes after the last step.
    assert [r["outside_s"] for r in rows] == pytest.approx(
        [EVAL_S if r["step"] in (7, 13) else 0.0 for r in rows])
    assert summary.time.step_s_median == pytest.approx(STEP_S)
    assert summary.time.outside_steps_s == pytest.approx(3 * EVAL_S)


def test_an_evaluation_on_its_own_loader_between_steps_is_outside(tmp_path, clock):
    meter = meter_for(tmp_path, "between", clock)
    with AutoPatch(meter):
        model, optimizer = model_and_optimizer()
        train(clock, model, optimizer, DataLoader(Timed(clock, 12 * BATCH), batch_size=BATCH),
              eval_every=4)
    meter.finish()
    rows = rows_of(meter)
    assert [r["step_s"] for r in rows] == pytest.approx([STEP_S] * 12)
    assert [r["outside_s"] for r in rows] == pytest.approx(
        [EVAL_S if r["step"] in (5, 9) else 0.0 for r in rows])


def test_the_same_figures_as_the_meter_in_the_loop_with_the_tail_inside_the_step(
        tmp_path, clock):
    hand = meter_for(tmp_path, "hand", clock)
    model, optimizer = model_and_optimizer()
    for x, y in hand.loader(DataLoader(Timed(clock, 10 * BATCH), batch_size=BATCH)):
        with hand.step():
            clock.advance(COMPUTE_S)
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            hand.observe(loss=loss)
            optimizer.step()
            optimizer.zero_grad()
            clock.advance(TAIL_S)
    by_hand = hand.finish()
    auto = meter_for(tmp_path, "auto", clock)
    with AutoPatch(auto):
        model, optimizer = model_and_optimizer()
        train(clock, model, optimizer, DataLoader(Timed(clock, 10 * BATCH), batch_size=BATCH))
    patched = auto.finish()
    keys = ("step", "step_s", "wait_s", "samples", "micro_batches", "loss", "outside_s")
    rows_auto, rows_hand = rows_of(auto), rows_of(hand)
    assert len(rows_auto) == len(rows_hand) == 10
    for a, b in zip(rows_auto, rows_hand, strict=True):
        assert {k: a[k] for k in keys} == pytest.approx({k: b[k] for k in keys})
    for section in ("steps", "throughput", "data"):
        a, b = patched.to_dict()[section], by_hand.to_dict()[section]
        assert a.pop("loader", None) == b.pop("loader", None)
        assert a.pop("window_ends", None) == b.pop("window_ends", None)
        assert a == pytest.approx(b)
    assert patched.time.step_s_median == pytest.approx(STEP_S)


def test_breaking_out_of_the_loop_closes_the_last_step_there(tmp_path, clock):
    meter = meter_for(tmp_path, "break", clock)
    with AutoPatch(meter):
        model, optimizer = model_and_optimizer()
        for i, (x, y) in enumerate(DataLoader(Timed(clock, 20 * BATCH), batch_size=BATCH)):
            clock.advance(COMPUTE_S)
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
            clock.advance(TAIL_S)
            if i == 7:
                break
        clock.advance(1.0)  # saving the model: after the loop, not in its last step
    meter.finish()
    rows = rows_of(meter)
    assert [r["step_s"] for r in rows] == pytest.approx([STEP_S] * 8)


def test_a_second_optimizer_after_the_first_is_inside_the_step(tmp_path, clock):
    meter = meter_for(tmp_path, "gan", clock)
    torch.manual_seed(0)
    generator, critic = torch.nn.Linear(2, 4), torch.nn.Linear(4, 1)
    with AutoPatch(meter):
        opt_g = torch.optim.Adam(generator.parameters())
        opt_d = torch.optim.SGD(critic.parameters(), lr=0.01)
        for (real,) in DataLoader(torch.utils.data.TensorDataset(torch.randn(40, 4)),
                                  batch_size=4):
            fake = generator(torch.randn(4, 2))
            (critic(fake.detach()).mean() - critic(real).mean()).backward()
            opt_d.step()  # the first to step: it marks the steps
            opt_d.zero_grad()
            clock.advance(0.01)  # the generator's half of the iteration
            (-critic(fake).mean()).backward()
            opt_g.step()
            opt_g.zero_grad()
    meter.finish()
    rows = rows_of(meter)
    assert [r["step_s"] for r in rows] == pytest.approx([0.01] * 10)  # one whole iteration
    assert [r["outside_s"] for r in rows] == pytest.approx([0.0] * 10)


SCALE = 1024.0


def scaled_loop(clock, meter, *, patch, enabled=True):
    """A GradScaler loop (CPU: torch.amp.GradScaler("cpu") scales for real)."""
    model, optimizer = model_and_optimizer()
    scaler = torch.amp.GradScaler("cpu", init_scale=SCALE, enabled=enabled)
    losses = []
    loader = DataLoader(Timed(clock, 8 * BATCH), batch_size=BATCH)
    batches = meter.loader(loader) if not patch else loader
    for x, y in batches:
        step = meter.step() if not patch else None
        if step is not None:
            step.__enter__()
        loss = torch.nn.functional.mse_loss(model(x), y)
        losses.append(loss.item())
        scaler.scale(loss).backward()
        if not patch:
            meter.observe(loss=loss)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
        if step is not None:
            step.__exit__(None, None, None)
    return losses


@pytest.mark.parametrize("enabled", [True, False])
def test_under_a_grad_scaler_the_loss_kept_is_the_unscaled_one(tmp_path, clock, enabled):
    hand = meter_for(tmp_path, "hand", clock)
    truth = scaled_loop(clock, hand, patch=False, enabled=enabled)
    hand.finish()
    auto = meter_for(tmp_path, "auto", clock)
    with AutoPatch(auto):
        seen = scaled_loop(clock, auto, patch=True, enabled=enabled)
    auto.finish()
    assert seen == truth  # the same training
    losses = [r["loss"] for r in rows_of(auto)]
    assert losses == pytest.approx(truth, rel=1e-6)  # not SCALE times it
    assert losses == pytest.approx([r["loss"] for r in rows_of(hand)], rel=1e-6)


def test_the_loss_before_scaling_is_kept_only_for_the_tensor_scale_made(tmp_path, clock):
    seen = []
    meter = meter_for(tmp_path, "which", clock)
    meter.observe = lambda **kw: seen.append(kw["loss"])
    scaler = torch.amp.GradScaler("cpu", init_scale=SCALE)
    weight = torch.ones(1, requires_grad=True)
    with AutoPatch(meter):
        loss = (weight * 3.0).sum()
        scaled = scaler.scale(loss)
        other = (weight * 5.0).sum()
        other.backward()  # not the scaled tensor: kept as it is
        scaled.backward()
        (weight * 7.0).sum().backward()  # the pairing was used up
    meter.finish()
    assert [float(v.detach()) for v in seen] == [5.0, 3.0, 7.0]
    assert scaler.scale(loss).item() == pytest.approx(3.0 * SCALE)  # removed: scales as before


def test_remove_restores_grad_scaler_scale(tmp_path, clock):
    before = torch.amp.GradScaler.scale
    patch = AutoPatch(meter_for(tmp_path, "undo", clock))
    patch.install()
    assert torch.amp.GradScaler.scale is not before
    patch.remove()
    assert torch.amp.GradScaler.scale is before
