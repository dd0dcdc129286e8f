"""AutoPatch in-process: the same loop metered by hand and through the hooks gives the same
figures (on a manual clock, so the truth is exact); what the hooks infer and what they undo."""

import json

import pytest
import torch
from clocked_loop import BATCH, WAIT_S, Timed, model_and_optimizer
from torch.utils.data import DataLoader

import trainpace
from trainpace.integrations.autopatch import AutoPatch

pytestmark = pytest.mark.usefixtures("without_host_readings")

COMPUTE_S = 0.006  # per micro-batch, in the loop body


def quiet_meter(tmp_path, name, clock, **kwargs):
    kwargs.setdefault("count_flops", False)
    return trainpace.Meter(tmp_path / name, console=False, report=False, clock=clock, window=5,
                           warmup=2, **kwargs)


def by_hand(tmp_path, clock, *, steps, accumulate=1, **kwargs):
    meter = quiet_meter(tmp_path, "meter", clock, **kwargs)
    model, optimizer = model_and_optimizer()
    batches = iter(meter.loader(DataLoader(Timed(clock, steps * accumulate * BATCH),
                                           batch_size=BATCH)))
    for _ in range(steps):
        with meter.step():
            for _ in range(accumulate):
                x, y = next(batches)
                clock.advance(COMPUTE_S)
                loss = torch.nn.functional.mse_loss(model(x), y)
                loss.backward()
                meter.observe(loss=loss)
            optimizer.step()
            optimizer.zero_grad()
    return meter.finish(), meter.path


def patched(tmp_path, clock, *, steps, accumulate=1, name="patched", **kwargs):
    meter = quiet_meter(tmp_path, name, clock, **kwargs)
    with AutoPatch(meter) as patch:
        model, optimizer = model_and_optimizer()
        loader = DataLoader(Timed(clock, steps * accumulate * BATCH), batch_size=BATCH)
        for i, (x, y) in enumerate(loader):
            clock.advance(COMPUTE_S)
            torch.nn.functional.mse_loss(model(x), y).backward()
            if (i + 1) % accumulate == 0:
                optimizer.step()
                optimizer.zero_grad()
    return meter.finish(), meter.path, patch


def steps_of(path):
    return [json.loads(line) for line in (path / "steps.jsonl").read_text().splitlines()]


KEYS = ("step", "step_s", "wait_s", "samples", "micro_batches", "loss")


@pytest.mark.parametrize("accumulate", [1, 4])
def test_the_same_loop_by_hand_and_patched_gives_the_same_figures(tmp_path, clock, accumulate):
    hand, hand_path = by_hand(tmp_path, clock, steps=12, accumulate=accumulate)
    auto, auto_path, patch = patched(tmp_path, clock, steps=12, accumulate=accumulate)
    # The truth, exactly: each step is its micro-batches' wait and compute.
    step_s = accumulate * (BATCH * WAIT_S + COMPUTE_S)
    for s in (hand, auto):
        assert (s.steps.total, s.steps.warmup, s.steps.measured) == (12, 2, 10)
        assert s.time.step_s_median == pytest.approx(step_s)
        assert s.throughput.samples_per_s == pytest.approx(accumulate * BATCH / step_s)
        assert s.data.wait_pct == pytest.approx(100 * BATCH * WAIT_S / (BATCH * WAIT_S + COMPUTE_S))
    for section in ("steps", "throughput", "data"):
        hand_figures, auto_figures = hand.to_dict()[section], auto.to_dict()[section]
        assert auto_figures.pop("loader", None) == hand_figures.pop("loader", None)
        # the patched loop runs its loader to the end (a window ends there); the loop by
        # hand takes exactly its batches and never asks for one more
        ends = (auto_figures.pop("window_ends", None), hand_figures.pop("window_ends", None))
        assert ends == (([12], []) if section == "steps" else (None, None))
        assert auto_figures == pytest.approx(hand_figures)
    assert auto.time.step_s_p90 == pytest.approx(hand.time.step_s_p90)
    rows_hand, rows_auto = steps_of(hand_path), steps_of(auto_path)
    assert len(rows_auto) == 12
    for a, b in zip(rows_hand, rows_auto, strict=True):
        assert {k: b[k] for k in KEYS} == pytest.approx({k: a[k] for k in KEYS})
        assert b["micro_batches"] == accumulate
    assert patch.seen.optimizer_steps == 12
    assert patch.seen.loaders_metered == 1
    assert patch.blind_spots() == []


def test_the_flops_of_the_first_step_are_counted_as_the_meter_counts_them(tmp_path, clock):
    hand, _ = by_hand(tmp_path, clock, steps=4, accumulate=2, count_flops=True)
    auto, _, _ = patched(tmp_path, clock, steps=4, accumulate=2, count_flops=True)
    # Linear(4, 1) on 2 micro-batches of 4: forward 2·4·4·1 FLOPs, and as many for the weight
    # gradient (the input needs none), each.
    assert hand.flops.per_step == 2 * 2 * (2 * BATCH * 4 * 1)
    assert auto.flops.per_step == hand.flops.per_step


def test_a_loader_iterated_under_no_grad_is_evaluation_and_not_metered(tmp_path, clock):
    meter = quiet_meter(tmp_path, "eval", clock)
    with AutoPatch(meter) as patch:
        model, optimizer = model_and_optimizer()
        for _ in range(2):
            for x, y in DataLoader(Timed(clock, 6 * BATCH), batch_size=BATCH):
                torch.nn.functional.mse_loss(model(x), y).backward()
                optimizer.step()
                optimizer.zero_grad()
            with torch.no_grad():
                for x, _ in DataLoader(Timed(clock, 3 * BATCH), batch_size=BATCH):
                    model(x)  # an evaluation forward opens no step
    meter.finish()
    rows = steps_of(meter.path)
    assert [r["micro_batches"] for r in rows] == [1] * 12
    assert [r["samples"] for r in rows] == [BATCH] * 12
    assert (patch.seen.loaders_metered, patch.seen.loaders_skipped) == (2, 2)


def test_several_optimizers_the_first_to_step_marks_the_steps(tmp_path, clock):
    meter = quiet_meter(tmp_path, "gan", clock)
    torch.manual_seed(0)
    generator, critic = torch.nn.Linear(2, 4), torch.nn.Linear(4, 1)
    with AutoPatch(meter) as patch:
        opt_g = torch.optim.Adam(generator.parameters())
        opt_d = torch.optim.SGD(critic.parameters(), lr=0.01)
        for (real,) in DataLoader(torch.utils.data.TensorDataset(torch.randn(40, 4)), batch_size=4):
            fake = generator(torch.randn(4, 2))
            (critic(fake.detach()).mean() - critic(real).mean()).backward()
            opt_d.step()
            opt_d.zero_grad()
            clock.advance(0.01)
            (-critic(fake).mean()).backward()
            opt_g.step()
            opt_g.zero_grad()
    summary = meter.finish()
    assert summary.steps.total == 10
    assert patch.pacer == "SGD"
    assert patch.seen.optimizers and list(patch.seen.optimizers.values()) == ["SGD", "Adam"]
    (finding,) = [f for f in patch.blind_spots() if f.id == "run_several_optimizers"]
    assert finding.evidence == {"optimizers": ["SGD", "Adam"], "steps_marked_by": "SGD"}


def test_a_second_training_loop_with_its_own_optimizer_is_metered_too(tmp_path, clock):
    meter = quiet_meter(tmp_path, "two", clock)
    with AutoPatch(meter) as patch:
        model, sgd = model_and_optimizer()
        adam = torch.optim.Adam(model.parameters())
        for optimizer in (sgd, adam):  # a loop, then a fine-tuning loop with another optimizer
            for x, y in DataLoader(Timed(clock, 8 * BATCH), batch_size=BATCH):
                clock.advance(COMPUTE_S)
                torch.nn.functional.mse_loss(model(x), y).backward()
                optimizer.step()
                optimizer.zero_grad()
    summary = meter.finish()
    rows = [json.loads(line) for line in (tmp_path / "two" / "steps.jsonl").read_text().splitlines()]
    # Adam's first two iterations are one step: only its second step() says it paces now.
    assert [r["micro_batches"] for r in rows] == [1] * 8 + [2] + [1] * 6
    assert summary.steps.total == 15
    assert summary.time.outside_steps_s == pytest.approx(0.0, abs=1e-9)
    assert patch.seen.pacers == ["SGD", "Adam"]
    (finding,) = [f for f in patch.blind_spots() if f.id == "run_several_optimizers"]
    assert finding.evidence == {"optimizers": ["SGD", "Adam"], "steps_marked_by": ["SGD", "Adam"]}
    assert "SGD then Adam" in finding.title


def test_no_dataloader_gets_step_times_and_the_given_samples_per_step(tmp_path, clock):
    samples, tokens = AutoPatch.counters(32, 640)
    meter = quiet_meter(tmp_path, "counts", clock, samples=samples, tokens=tokens)
    x, y = torch.randn(80, 4), torch.randn(80, 1)
    with AutoPatch(meter, samples=samples, tokens=tokens) as patch:
        model, optimizer = model_and_optimizer()
        for i in range(0, 80, 8):
            clock.advance(0.005)
            torch.nn.functional.mse_loss(model(x[i:i + 8]), y[i:i + 8]).backward()
            optimizer.step()
            optimizer.zero_grad()
    summary = meter.finish()
    assert summary.steps.total == 10
    assert summary.time.step_s_median == pytest.approx(0.005)
    assert summary.throughput.samples_per_s == pytest.approx(32 / 0.005)
    assert summary.throughput.tokens_per_s == pytest.approx(640 / 0.005)
    assert [r["samples"] for r in steps_of(meter.path)] == [32] * 10
    # the counts were given, but no DataLoader was iterated: the data wait stays unknown
    [blind] = patch.blind_spots()
    assert blind.id == "run_no_dataloader"
    assert blind.title == ("No torch.utils.data.DataLoader was iterated for training: the data "
                           "wait is unknown")


def test_without_dataloader_nor_counts_the_report_says_what_it_could_not_see(tmp_path, clock):
    meter = quiet_meter(tmp_path, "blind", clock)
    with AutoPatch(meter) as patch:
        model, _optimizer = model_and_optimizer()  # made, never stepped: nothing ends a step
        model(torch.ones(2, 4)).sum().backward()
    meter.finish()
    ids = [f.id for f in patch.blind_spots()]
    assert ids == ["run_no_optimizer_step", "run_no_dataloader"]
    assert patch.blind_spots()[0].evidence == {"optimizer_steps": 0, "backward_calls": 1,
                                               "dataloaders_iterated": 0}


def by_hand_update(model):
    with torch.no_grad():
        for p in model.parameters():
            p -= 0.01 * p.grad
            p.grad = None


def test_without_an_optimizer_each_backward_ends_a_step(tmp_path, clock):
    meter = quiet_meter(tmp_path, "by-hand", clock)
    torch.manual_seed(0)
    with AutoPatch(meter) as patch:
        model = torch.nn.Linear(4, 1)  # made while installed: no optimizer is
        for _ in range(6):
            clock.advance(0.004)  # before the forward: in the step's cycle (not the first's)
            model(torch.ones(2, 4)).sum().backward()
            clock.advance(0.001)  # the update by hand: in the next step's cycle
            by_hand_update(model)
    summary = meter.finish()
    assert summary.steps.total == 6
    # the first step opened at its forward; each other is a whole iteration
    assert [r["step_s"] for r in steps_of(meter.path)] == pytest.approx([0.0] + [0.005] * 5)
    assert [f.id for f in patch.blind_spots()] == ["run_paced_by_backward", "run_no_dataloader"]
    assert patch.blind_spots()[0].evidence == {"optimizers_made": 0, "backward_calls": 6,
                                               "dataloaders_iterated": 0}


def test_without_an_optimizer_the_backward_calls_on_one_batch_are_its_step(tmp_path, clock):
    meter = quiet_meter(tmp_path, "by-hand-loader", clock)
    torch.manual_seed(0)
    with AutoPatch(meter):
        model = torch.nn.Linear(4, 1)
        for x, y in DataLoader(Timed(clock, 5 * BATCH), batch_size=BATCH):
            clock.advance(COMPUTE_S)
            for _ in range(2):  # two losses, two backward() calls: one step
                torch.nn.functional.mse_loss(model(x), y).backward()
            by_hand_update(model)
    summary = meter.finish()
    assert summary.steps.total == 5
    assert {r["samples"] for r in steps_of(meter.path)} == {BATCH}
    assert summary.time.step_s_median == pytest.approx(BATCH * WAIT_S + COMPUTE_S)


def test_once_an_optimizer_is_made_backward_ends_no_step(tmp_path, clock):
    meter = quiet_meter(tmp_path, "accumulated", clock)
    with AutoPatch(meter) as patch:
        model, optimizer = model_and_optimizer()
        for i in range(12):
            model(torch.ones(2, 4)).sum().backward()
            if (i + 1) % 3 == 0:
                optimizer.step()
                optimizer.zero_grad()
    assert meter.finish().steps.total == 4
    assert patch.seen.optimizers_made == 1


def test_the_loss_is_the_tensor_passed_to_backward_kept_as_a_tensor(tmp_path, clock):
    seen = []
    meter = quiet_meter(tmp_path, "loss", clock)
    meter.observe = lambda **kw: seen.append(kw["loss"])  # what the patch hands over
    model, optimizer = model_and_optimizer()
    with AutoPatch(meter):
        loss = model(torch.ones(2, 4)).sum()
        loss.backward()
        out = model(torch.ones(2, 4))
        torch.autograd.backward(out, torch.ones_like(out))  # not a scalar: not a loss
        optimizer.step()
    meter.finish()
    assert len(seen) == 1
    assert seen[0] is loss  # no .item(): the Meter reads it at the window boundary


def test_remove_undoes_every_patch(tmp_path, clock):
    iter_before, backward_before = DataLoader.__iter__, torch.autograd.backward
    optimizer_init_before = torch.optim.Optimizer.__init__
    meter = quiet_meter(tmp_path, "undo", clock)
    model, optimizer = model_and_optimizer()
    patch = AutoPatch(meter)
    patch.install()
    assert DataLoader.__iter__ is not iter_before
    patch.remove()
    assert DataLoader.__iter__ is iter_before
    assert torch.autograd.backward is backward_before
    assert torch.optim.Optimizer.__init__ is optimizer_init_before
    model(torch.ones(1, 4)).sum().backward()
    optimizer.step()
    assert meter.finish().steps.total == 0
    assert patch.seen.optimizer_steps == 0


def test_a_step_left_open_at_the_end_is_not_counted(tmp_path, clock):
    meter = quiet_meter(tmp_path, "open", clock)
    with AutoPatch(meter):
        model, optimizer = model_and_optimizer()
        for _ in range(3):
            model(torch.ones(1, 4)).sum().backward()
            optimizer.step()
        model(torch.ones(1, 4)).sum().backward()  # the script ended before this step's step()
    assert meter.finish().steps.total == 3


def test_profile_steps_record_a_trace_of_the_patched_steps(tmp_path, clock):
    meter = trainpace.Meter(tmp_path / "profiled", console=False, report=False,
                            count_flops=False, window=4, profile_steps=(3, 5))
    with AutoPatch(meter):
        model, optimizer = model_and_optimizer()
        for (x,) in DataLoader(torch.utils.data.TensorDataset(torch.randn(64, 4)), batch_size=8):
            model(x).pow(2).mean().backward()
            optimizer.step()
            optimizer.zero_grad()
    assert meter.finish().steps.total == 8
    assert (meter.path / "profile" / "profile_rank0.pt.trace.json.gz").exists()
    analysis = json.loads((meter.path / "profile_analysis.json").read_text())
    assert analysis["schema"] == "trainpace.trace/1"  # the trace of steps 3..5, analyzed
    (trace,) = analysis["traces"]
    assert trace["events"] > 0
