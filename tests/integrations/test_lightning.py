"""The Lightning callback on real fits of a tiny module, on a manual clock that the module's
work advances by known amounts (so every figure is known exactly, whatever the machine's
load), checked against an independent timer recorded in the same fit."""

import csv
import json
import statistics

import pytest
import torch

pl = pytest.importorskip("lightning.pytorch")
from lightning.pytorch.loggers import CSVLogger  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

import trainpace  # noqa: E402
from manual_clock import ManualClock  # noqa: E402
from trainpace.integrations.lightning import TrainpaceCallback  # noqa: E402

pytestmark = [
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),  # Lightning on a newer torch (pytree)
    pytest.mark.filterwarnings("ignore::UserWarning"),  # Lightning's advice (num_workers, ...)
    pytest.mark.filterwarnings("ignore::lightning.fabric.utilities.warnings.PossibleUserWarning"),
]

BATCH = 4
LOAD_S = 0.010  # each training batch takes this long to make
TRAIN_S = 0.015  # each training micro-step
VAL_S = 0.060  # each validation batch: kept out of the steps
FRAMEWORK_S = 0.010  # work after every hook of a training batch (as Lightning's own is)
SAVE_S = 0.200  # each checkpoint save (Lightning's ModelCheckpoint, after each validation)


class Collate:
    """A slow collate that times itself: the independent truth of the data wait."""

    def __init__(self, delay_s, log, clock):
        self.delay_s = delay_s
        self.log = log
        self.clock = clock

    def __call__(self, items):
        started = self.clock()
        self.clock.advance(self.delay_s)
        batch = tuple(torch.stack(column) for column in zip(*items, strict=False))
        self.log.append((started, self.clock()))
        return batch


class Tiny(pl.LightningModule):
    def __init__(self, clock):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
        self.clock = clock
        self.logged = []  # (Lightning's step for this batch's rows, the loss logged)

    def training_step(self, batch, batch_idx):
        x, y = batch
        self.clock.advance(TRAIN_S)
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        self.log("train/loss", loss)  # the user's own series, which trainpace never writes
        self.logged.append((self.trainer.fit_loop.epoch_loop._batches_that_stepped, float(loss)))
        return loss

    def validation_step(self, batch, batch_idx):
        self.clock.advance(VAL_S)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


class StepTimes(pl.Callback):
    """The framework's work after every hook of a batch (the last callback, after
    trainpace's), and the independent timer: when each optimizer step's iteration ended."""

    def __init__(self, clock):
        self.ends = []
        self._seen = 0
        self.clock = clock

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.clock.advance(FRAMEWORK_S)
        if trainer.global_step != self._seen:
            self._seen = trainer.global_step
            self.ends.append(self.clock())


class SlowSaves(pl.Callback):
    """Each checkpoint save takes SAVE_S (a callback after trainpace's, as the writing of the
    file comes after every callback's ``on_save_checkpoint``)."""

    def __init__(self, clock):
        self.clock = clock
        self.saves = 0

    def on_save_checkpoint(self, trainer, pl_module, checkpoint):
        self.saves += 1
        self.clock.advance(SAVE_S)


def loaders(n_batches, fetches, clock):
    data = TensorDataset(torch.randn(n_batches * BATCH, 4), torch.randn(n_batches * BATCH, 1))
    train = DataLoader(data, batch_size=BATCH, collate_fn=Collate(LOAD_S, fetches, clock))
    val = DataLoader(data, batch_size=BATCH, collate_fn=Collate(VAL_S / 10, [], clock))
    return train, val


def fit(tmp_path, *, accumulate=2, epochs=2, n_batches=8, **options):
    fetches = []
    clock = ManualClock()
    train, val = loaders(n_batches, fetches, clock)
    timer = StepTimes(clock)
    callback = TrainpaceCallback(tmp_path / "run", window=4, warmup=2, console=False,
                                 report=False, count_flops=False, clock=clock, **options)
    trainer = pl.Trainer(
        accelerator="cpu", devices=1, max_epochs=epochs, accumulate_grad_batches=accumulate,
        limit_val_batches=2, num_sanity_val_steps=0, enable_progress_bar=False,
        log_every_n_steps=1,
        enable_model_summary=False, default_root_dir=tmp_path,
        logger=CSVLogger(tmp_path / "logs", name="", version=""),
        callbacks=[callback, timer, SlowSaves(clock)],
    )
    module = Tiny(clock)
    trainer.fit(module, train, val)
    steps = [json.loads(line) for line in (tmp_path / "run" / "steps.jsonl").open()]
    return trainer, callback, timer, fetches, steps, module


def independent_cycles(timer, fetches, accumulate):
    """Each step from the start of its first batch's fetch to its end: no validation inside."""
    firsts = [start for start, _ in fetches[::accumulate]]
    return [end - first for first, end in zip(firsts, timer.ends, strict=True)]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """One fit shared by the tests that only read it (CPU time is scarce)."""
    path = tmp_path_factory.mktemp("fit")
    return path, *fit(path)


def test_steps_are_optimizer_steps_with_all_their_micro_batches(run):
    _, trainer, callback, _timer, fetches, steps, _module = run
    assert trainer.global_step == 8
    assert callback.summary.steps.total == 8
    assert [s["step"] for s in steps] == list(range(1, 9))
    assert [s["samples"] for s in steps] == [2 * BATCH] * 8
    assert [s["micro_batches"] for s in steps] == [2] * 8
    # The wait is the DataLoader's, timed in it: its two collates, on the clock
    collate_s = [end - start for start, end in fetches]
    assert collate_s == pytest.approx([LOAD_S] * 16)
    assert [s["wait_s"] for s in steps] == pytest.approx([2 * LOAD_S] * 8)
    assert all(s["loss"] is not None for s in steps)


def test_meta_says_lightning_made_the_meter(run):
    folder = run[0] / "run"
    assert json.loads((folder / "meta.json").read_text())["made_by"] == "lightning"


def test_figures_match_an_independent_timer_and_validation_is_outside(run):
    _, _trainer, callback, timer, fetches, steps, _module = run
    truth = independent_cycles(timer, fetches, 2)
    # each step is the whole iteration: the framework's work after the hooks included
    assert truth == pytest.approx([2 * (LOAD_S + TRAIN_S + FRAMEWORK_S)] * 8)
    assert [s["step_s"] for s in steps] == pytest.approx(truth)
    summary = callback.summary
    assert summary.throughput.samples_per_s == pytest.approx(
        2 * BATCH / (2 * (LOAD_S + TRAIN_S + FRAMEWORK_S)))
    # The validation after each epoch (2 batches of VAL_S, and their collates of VAL_S / 10)
    # is outside the steps (the first one before the first step of epoch 2) and in the wall
    # time, up to the end of the fit.
    # and so is the checkpoint saved after it.
    validation_s = 2 * (VAL_S + VAL_S / 10)
    assert [s["outside_s"] for s in steps] == pytest.approx(
        [0.0] * 4 + [validation_s + SAVE_S] + [0.0] * 3, abs=1e-9)
    assert summary.time.wall_s == pytest.approx(sum(truth) + 2 * (validation_s + SAVE_S))


def test_the_frameworks_own_work_is_measured_and_found(run):
    tmp_path, _trainer, callback, _timer, _fetches, _steps, _module = run
    meta = json.loads((tmp_path / "run" / "meta.json").read_text())
    share_pct = 100 * FRAMEWORK_S / (LOAD_S + TRAIN_S + FRAMEWORK_S)
    assert meta["framework"] == pytest.approx({
        "name": "lightning", "steps": 6, "work_s_per_step": 2 * FRAMEWORK_S,
        "step_s_mean": 2 * (LOAD_S + TRAIN_S + FRAMEWORK_S), "work_pct": share_pct})
    found = {f.id: f for f in callback.summary.diagnosis.findings}
    assert found["framework_work"].evidence["work_pct"] == pytest.approx(share_pct)
    assert found["framework_work"].title.startswith("Framework work per step: 20 ms, 29%")
    assert "outside_steps" not in found or "evaluation" in found["outside_steps"].advice[0]


def test_window_figures_reach_the_loggers_on_lightnings_step_axis_beside_the_users_series(run):
    tmp_path, _trainer, _callback, _timer, _fetches, steps, module = run
    with (tmp_path / "logs" / "metrics.csv").open() as f:
        rows = list(csv.DictReader(f))
    ours = [row for row in rows if row.get("trainpace/time/step_median_ms")]
    users = [row for row in rows if row.get("train/loss")]
    # The user's series holds the user's values only: one per optimizer step, the loss of
    # its last micro-batch, at the step Lightning gave it; trainpace's window mean has a
    # name of its own.
    stepping = module.logged[1::2]
    assert [int(row["step"]) for row in users] == [at for at, _ in stepping] == list(range(8))
    assert [float(row["train/loss"]) for row in users] == pytest.approx(
        [loss for _, loss in stepping])
    assert all(not row["train/loss"] for row in ours)
    assert all(row["trainpace/loss/window_mean"] for row in ours)
    # Each window is drawn where Lightning drew the batch that ended its last step (4, 8).
    assert [int(row["step"]) for row in ours] == [stepping[3][0], stepping[7][0]] == [3, 7]
    for row, window in zip(ours, (steps[:4], steps[4:]), strict=True):
        measured = [s["step_s"] for s in window if s["step"] > 2]
        assert float(row["trainpace/time/step_median_ms"]) == pytest.approx(
            1e3 * statistics.median(measured), rel=1e-6)
        assert float(row["trainpace/throughput/samples_per_s"]) == pytest.approx(
            2 * BATCH * len(measured) / sum(measured), rel=1e-6)


def test_the_loaders_are_given_back_and_a_second_fit_is_metered_afresh(tmp_path):
    fetches = []
    clock = ManualClock()
    train, _val = loaders(4, fetches, clock)
    for attempt in (1, 2):
        callback = TrainpaceCallback(window=2, warmup=0, console=False, report=False,
                                     count_flops=False, clock=clock)
        trainer = pl.Trainer(accelerator="cpu", devices=1, max_epochs=1, logger=False,
                             enable_checkpointing=False, enable_progress_bar=False,
                             enable_model_summary=False, callbacks=[callback],
                             default_root_dir=tmp_path)
        trainer.fit(Tiny(clock), train)
        assert type(train) is DataLoader, attempt
        assert callback.summary.steps.total == 4
        assert callback.summary.data.wait_s_per_step == pytest.approx(LOAD_S)


def test_a_keyword_the_meter_does_not_take_is_a_config_error():
    with pytest.raises(trainpace.ConfigError, match=r"windw is not a trainpace\.Meter keyword"):
        TrainpaceCallback(windw=10)


def test_without_lightning_the_error_names_the_extra(monkeypatch):
    import builtins
    import importlib
    import sys

    real_import = builtins.__import__

    def no_lightning(name, *args, **kwargs):
        if name.split(".")[0] in ("lightning", "pytorch_lightning"):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.delitem(sys.modules, "trainpace.integrations.lightning")
    monkeypatch.setattr(builtins, "__import__", no_lightning)
    with pytest.raises(trainpace.MissingDependencyError,
                       match=r"pip install 'trainpace\[lightning\]'"):
        importlib.import_module("trainpace.integrations.lightning")


@pytest.mark.slow
def test_under_ddp_each_rank_meters_itself(tmp_path):
    from lightning.pytorch.demos.boring_classes import BoringModel, RandomDataset

    callback = TrainpaceCallback(tmp_path / "run", window=4, console=False, report=False,
                                 count_flops=False)
    trainer = pl.Trainer(accelerator="cpu", devices=2, strategy="ddp_spawn", max_epochs=1,
                         logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, callbacks=[callback])
    trainer.fit(BoringModel(), DataLoader(RandomDataset(32, 64), batch_size=4))
    for rank in (0, 1):
        folder = tmp_path / "run" / f"rank{rank}"
        steps = [json.loads(line) for line in (folder / "steps.jsonl").open()]
        # DDP's sampler gives each rank half of the 64 samples: the loader was timed after
        # Lightning put its DistributedSampler in.
        assert [s["samples"] for s in steps] == [4] * 8
        assert json.loads((folder / "meta.json").read_text())["run_id"] == "run"


def real_fit_truth(out, ranks):
    """Global samples/s from the fit's independent timers: the sum of samples over the
    ranks / the slowest rank's wall time of its training iterations."""
    truths = [json.loads((out / f"truth{rank}.json").read_text()) for rank in range(ranks)]
    return sum(t["samples"] for t in truths) / max(t["seconds"] for t in truths)


def test_a_real_fit_is_measured_within_2_percent_of_its_own_timer(tmp_path):
    """One process, a tiny model (steps of a few ms), on the real clock: Lightning's work
    after the user's hooks is inside the steps."""
    from lightning_fit import BATCHES, WARMUP
    from lightning_fit import fit as real_fit

    callback, _timer, _trainer = real_fit(tmp_path)
    summary = callback.summary
    assert summary.steps.total == BATCHES and summary.steps.measured == BATCHES - WARMUP
    ratio = summary.throughput.samples_per_s / real_fit_truth(tmp_path, 1)
    assert ratio == pytest.approx(1.0, abs=0.02)
    meta = json.loads((tmp_path / "run" / "meta.json").read_text())
    assert meta["framework"]["name"] == "lightning"
    assert 0 < meta["framework"]["work_pct"] < 100


@pytest.mark.slow
def test_under_ddp_the_job_is_measured_within_2_percent_of_its_ranks_timers(tmp_path):
    """Two CPU processes (``strategy="ddp"``): Lightning's SIGTERM-flag broadcast before
    each batch is inside the steps, nothing is outside them, and the global samples/s is the
    sum of samples over the slowest rank's iterations."""
    import subprocess
    import sys
    from pathlib import Path

    from lightning_fit import BATCHES, WARMUP

    script = Path(__file__).with_name("lightning_fit.py")
    done = subprocess.run([sys.executable, str(script), str(tmp_path), "2"], timeout=300,
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    job = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert job["world_size"] == 2
    ratio = job["throughput"]["samples_per_s"] / real_fit_truth(tmp_path, 2)
    assert ratio == pytest.approx(1.0, abs=0.02)
    assert job["time"]["outside_steps_pct"] < 1.0  # no validation, no checkpoint
    assert "outside_steps" not in {f["id"] for f in job["diagnosis"]["findings"]}
    notes = [json.loads((tmp_path / "run" / f"rank{rank}" / "meta.json").read_text())["framework"]
             for rank in (0, 1)]
    assert [(note["name"], note["steps"]) for note in notes] == [
        ("lightning", BATCHES - WARMUP)] * 2
    # the job's diagnosis names rank 0's measured framework work when it is large
    found = {f["id"]: f for f in job["diagnosis"]["findings"]}
    if notes[0]["work_pct"] >= 10.0:
        assert found["framework_work"]["evidence"]["work_pct"] == pytest.approx(
            notes[0]["work_pct"])
    else:
        assert "framework_work" not in found
