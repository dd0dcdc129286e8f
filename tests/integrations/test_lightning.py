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

    def training_step(self, batch, batch_idx):
        x, y = batch
        self.clock.advance(TRAIN_S)
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def validation_step(self, batch, batch_idx):
        self.clock.advance(VAL_S)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


class StepTimes(pl.Callback):
    """Independent timer: when each optimizer step ended (after trainpace's callback)."""

    def __init__(self, clock):
        self.ends = []
        self._seen = 0
        self.clock = clock

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step != self._seen:
            self._seen = trainer.global_step
            self.ends.append(self.clock())


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
        enable_model_summary=False, default_root_dir=tmp_path,
        logger=CSVLogger(tmp_path / "logs", name="", version=""),
        callbacks=[callback, timer],
    )
    trainer.fit(Tiny(clock), train, val)
    steps = [json.loads(line) for line in (tmp_path / "run" / "steps.jsonl").open()]
    return trainer, callback, timer, fetches, steps


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
    _, trainer, callback, _timer, fetches, steps = run
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
    _, _trainer, callback, timer, fetches, steps = run
    truth = independent_cycles(timer, fetches, 2)
    assert truth == pytest.approx([2 * (LOAD_S + TRAIN_S)] * 8)
    assert [s["step_s"] for s in steps] == pytest.approx(truth)
    summary = callback.summary
    assert summary.throughput.samples_per_s == pytest.approx(2 * BATCH / (2 * (LOAD_S + TRAIN_S)))
    # The validation after each epoch (2 batches of VAL_S, and their collates of VAL_S / 10)
    # is outside the steps (the first one before the first step of epoch 2) and in the wall
    # time, up to the end of the fit.
    validation_s = 2 * (VAL_S + VAL_S / 10)
    assert [s["outside_s"] for s in steps] == pytest.approx(
        [0.0] * 4 + [validation_s] + [0.0] * 3, abs=1e-9)
    assert summary.time.wall_s == pytest.approx(sum(truth) + 2 * validation_s)


def test_window_figures_reach_the_trainers_loggers_with_the_same_names(run):
    tmp_path, _trainer, _callback, _timer, _fetches, steps = run
    with (tmp_path / "logs" / "metrics.csv").open() as f:
        rows = [row for row in csv.DictReader(f) if row.get("trainpace/time/step_median_ms")]
    assert [int(row["step"]) for row in rows] == [4, 8]
    for row, window in zip(rows, (steps[:4], steps[4:]), strict=True):
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
