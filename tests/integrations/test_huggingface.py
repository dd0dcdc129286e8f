"""The Hugging Face callback on real ``Trainer.train()`` runs of a tiny GPT-2 built from a
config (no download), padded variable-length batches, on a manual clock that the collate
advances by a known delay (so the time figures are known exactly, whatever the machine's
load), checked against an independent timer and token count recorded in the same run."""

import json
import statistics
import time
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")

import trainpace  # noqa: E402
from manual_clock import ManualClock  # noqa: E402
from trainpace.integrations.huggingface import TrainpaceCallback, TrainpaceTrainer  # noqa: E402

pytestmark = [
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
    pytest.mark.filterwarnings("ignore::UserWarning"),
]

BATCH = 4
ACCUMULATE = 2
STEPS = 8
LOAD_S = 0.010  # each batch takes this long to collate (on the test's clock)
FORWARD_S = 0.015  # each forward pass of the model, training or evaluating
FRAMEWORK_S = 0.005  # the Trainer's work after each step's hooks (as its logging is)
SAVE_S = 0.200  # each checkpoint save, timed after HF wrote it (on_save)


class PadCollate:
    """Pads to the longest sequence; times itself and counts the real tokens (the truth)."""

    def __init__(self, delay_s, log, clock):
        self.delay_s = delay_s
        self.log = log
        self.clock = clock

    def __call__(self, items):
        started = self.clock()
        self.clock.advance(self.delay_s)
        width = max(len(item["input_ids"]) for item in items)
        ids = torch.zeros(len(items), width, dtype=torch.long)
        mask = torch.zeros(len(items), width, dtype=torch.long)
        for row, item in enumerate(items):
            ids[row, :len(item["input_ids"])] = torch.tensor(item["input_ids"])
            mask[row, :len(item["input_ids"])] = 1
        labels = ids.masked_fill(mask == 0, -100)
        real = sum(len(item["input_ids"]) for item in items)
        self.log.append((started, self.clock(), real, ids.numel()))
        return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def dataset(n, seed):
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(3, 24, (n,), generator=generator)
    return [{"input_ids": torch.randint(1, 60, (int(k),), generator=generator).tolist()}
            for k in lengths]


class StepTimes(transformers.TrainerCallback):
    """The Trainer's work after each step's hooks (a callback after trainpace's), and the
    independent timer: when each optimizer step's iteration ended."""

    def __init__(self, clock):
        self.ends = []
        self.clock = clock

    def on_step_end(self, args, state, control, **kwargs):
        self.clock.advance(FRAMEWORK_S)
        self.ends.append(self.clock())


class SlowSaves(transformers.TrainerCallback):
    """The checkpoint saves after steps 4 and 8 take SAVE_S more: outside the steps."""

    def __init__(self, clock):
        self.clock = clock

    def on_save(self, args, state, control, **kwargs):
        self.clock.advance(SAVE_S)


def train(tmp_path, *, logging_steps=2, report_to="none", **options):
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=64, n_positions=32, n_embd=32, n_layer=1,
                                     n_head=2)
    model = transformers.GPT2LMHeadModel(config)
    fetches = []
    clock = ManualClock()
    model.register_forward_pre_hook(lambda *_: clock.advance(FORWARD_S))
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "hf"), per_device_train_batch_size=BATCH,
        per_device_eval_batch_size=BATCH, gradient_accumulation_steps=ACCUMULATE,
        max_steps=STEPS, eval_strategy="steps", eval_steps=4, logging_steps=logging_steps,
        save_strategy="steps", save_steps=4, save_only_model=True, report_to=report_to,
        use_cpu=True, dataloader_num_workers=0,
        disable_tqdm=True, learning_rate=1e-3, remove_unused_columns=False,
    )
    callback = TrainpaceCallback(tmp_path / "run", window=4, warmup=2, console=False,
                                 report=False, count_flops=False, clock=clock, **options)
    timer = StepTimes(clock)
    trainer = transformers.Trainer(
        model=model, args=args, train_dataset=dataset(STEPS * BATCH * ACCUMULATE, 1),
        eval_dataset=dataset(2 * BATCH, 2), data_collator=PadCollate(LOAD_S, fetches, clock),
        callbacks=[callback, timer, SlowSaves(clock)],
    )
    trainer.train()
    steps = [json.loads(line) for line in (tmp_path / "run" / "steps.jsonl").open()]
    # The collate of evaluation batches logs too: keep the training ones (their delay).
    return trainer, callback, timer, fetches, steps


def training_fetches(fetches):
    """The collates of training batches, in order. The evaluation batches (2 after step 4 and
    2 after step 8) go through the same collate; Accelerate's loader collates one batch ahead,
    so 9 training batches were made before the first evaluation."""
    return fetches[:9] + fetches[11:18]


def step_collates(fetched, s):
    """Indices of the collates that ran inside step ``s``'s (0-based) fetches: its batches
    2s and 2s+1 each made the batch after them (step 0 also made the first one)."""
    return [i for i in (2 * s, 2 * s + 1, 2 * s + 2) if (i > 2 * s or s == 0) and i < len(fetched)]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """One training run shared by the tests that only read it (CPU time is scarce)."""
    return train(tmp_path_factory.mktemp("hf"))


def test_steps_samples_and_real_tokens_of_all_micro_batches(run):
    trainer, callback, _timer, fetches, steps = run
    assert trainer.state.global_step == STEPS
    assert [s["step"] for s in steps] == list(range(1, STEPS + 1))
    assert [s["samples"] for s in steps] == [ACCUMULATE * BATCH] * STEPS
    assert [s["micro_batches"] for s in steps] == [ACCUMULATE] * STEPS
    fetched = training_fetches(fetches)
    real = [f[2] for f in fetched]
    padded = [f[3] for f in fetched]
    assert [s["tokens"] for s in steps] == [a + b for a, b in zip(real[::2], real[1::2], strict=True)]
    assert sum(s["tokens"] for s in steps) < sum(padded)  # padding is not counted
    assert callback.summary.throughput.tokens_counted == "non_padding"
    # the wait is the collates that ran inside the step's fetches, on the clock
    assert [f[1] - f[0] for f in fetched] == pytest.approx([LOAD_S] * len(fetched))
    assert [s["wait_s"] for s in steps] == pytest.approx(
        [LOAD_S * len(step_collates(fetched, s)) for s in range(STEPS)])
    assert [len(step_collates(fetched, s)) for s in range(STEPS)] == [3, 2, 2, 2, 2, 2, 2, 1]


def test_meta_says_the_hf_trainer_made_the_meter(run):
    folder = Path(run[1].out)
    assert json.loads((folder / "meta.json").read_text())["made_by"] == "hf"


def test_figures_match_an_independent_timer_and_evaluation_is_outside(run):
    _trainer, callback, timer, fetches, steps = run
    fetched = training_fetches(fetches)
    starts = [fetched[step_collates(fetched, s)[0]][0] for s in range(STEPS)]
    truth = [end - start for start, end in zip(starts, timer.ends, strict=True)]
    measured = [s["step_s"] for s in steps]
    assert measured == pytest.approx(truth)
    assert measured == pytest.approx(
        [LOAD_S * len(step_collates(fetched, s)) + ACCUMULATE * FORWARD_S + FRAMEWORK_S
         for s in range(STEPS)])
    truth_rate = ACCUMULATE * BATCH * len(truth[2:]) / sum(truth[2:])  # warm-up: 2 steps
    assert callback.summary.throughput.samples_per_s == pytest.approx(truth_rate)
    # the evaluation after step 4 (two batches collated and run forward) and the save after it
    assert [s["outside_s"] for s in steps] == pytest.approx(
        [0.0] * 4 + [2 * (LOAD_S + FORWARD_S) + SAVE_S] + [0.0] * 3, abs=1e-9)


def test_the_trainers_own_work_is_measured(run):
    _trainer, callback, _timer, _fetches, steps = run
    meta = json.loads((callback.out / "meta.json").read_text())
    measured = steps[2:]  # past the warm-up
    assert meta["framework"] == pytest.approx({
        "name": "huggingface", "steps": 6, "work_s_per_step": FRAMEWORK_S,
        "step_s_mean": statistics.mean(s["step_s"] for s in measured),
        "work_pct": 100 * FRAMEWORK_S * 6 / sum(s["step_s"] for s in measured)})


def window_entries(trainer):
    return [entry for entry in trainer.state.log_history
            if "trainpace/time/step_median_ms" in entry]


def test_every_window_reaches_log_history_at_its_own_step(run):
    trainer, _callback, _timer, _fetches, steps = run
    logged = window_entries(trainer)
    assert [entry["step"] for entry in logged] == [4, 8]  # the last window too
    for entry, window in zip(logged, (steps[:4], steps[4:]), strict=True):
        assert "loss" not in entry and not any(k.startswith("train/") for k in entry)
        measured = [s["step_s"] for s in window if s["step"] > 2]
        assert entry["trainpace/time/step_median_ms"] == pytest.approx(
            1e3 * statistics.median(measured))
    # HF's own entries are HF's: trainpace added nothing to them
    assert all(not any(k.startswith("trainpace/") for k in entry)
               for entry in trainer.state.log_history if entry not in logged)


def test_windows_are_not_dropped_when_hf_logs_less_often_than_a_window(tmp_path):
    trainer, *_ = train(tmp_path, logging_steps=10)  # HF logs no training step at all
    assert [entry["step"] for entry in window_entries(trainer)] == [4, 8]


def test_with_hfs_wandb_reporter_trainpace_declares_and_logs_only_its_own_names(tmp_path,
                                                                                 monkeypatch):
    wandb = pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    declared, rows = [], []
    run_class = wandb.sdk.wandb_run.Run
    real_define, real_log = run_class.define_metric, run_class.log

    def define_metric(self, name, *args, **kwargs):
        declared.append((name, kwargs.get("step_metric")))
        return real_define(self, name, *args, **kwargs)

    def log(self, data, *args, **kwargs):
        rows.append(dict(data))
        return real_log(self, data, *args, **kwargs)

    monkeypatch.setattr(run_class, "define_metric", define_metric)
    monkeypatch.setattr(run_class, "log", log)
    trainer, *_ = train(tmp_path, report_to=["wandb"])
    wandb.finish()
    hf = {("train/global_step", None), ("*", "train/global_step")}  # HF's own declarations
    ours = [d for d in declared if d not in hf]
    assert ours and all(name.startswith("trainpace/") for name, _ in ours), declared
    assert all(metric in (None, "trainpace/step") for _, metric in ours)
    keys = {key for row in rows for key in row}
    assert "trainpace/throughput/samples_per_s" in keys and "train/loss" in keys
    assert not any(key.startswith("train/trainpace") for key in keys)
    # HF's rows carry no trainpace key, trainpace's rows no key of HF's
    for row in rows:
        names = {key.split("/")[0] for key in row}
        assert names <= {"trainpace"} or "trainpace" not in names, row
    assert len(window_entries(trainer)) == 2


def test_the_mixin_times_job_events_and_leaves_hfs_logging_alone():
    """The mixin is for the job's ledger (saves, resuming loads, evaluations); trainpace's
    figures never go through HF's reporters, which would rename them ``train/trainpace/...``."""
    class Trainer(TrainpaceTrainer, transformers.Trainer):
        pass

    assert issubclass(Trainer, transformers.Trainer)
    assert "log" not in vars(TrainpaceTrainer)
    assert {"_save_checkpoint", "evaluate"} <= set(vars(TrainpaceTrainer))


def test_the_loader_is_given_back(run):
    trainer, callback, *_ = run
    loader = trainer.get_train_dataloader()
    assert "_trainpace_base" not in type(loader).__dict__
    assert callback.meter is None and callback.summary.steps.total == STEPS


def test_a_keyword_the_meter_does_not_take_is_a_config_error():
    with pytest.raises(trainpace.ConfigError, match=r"windw is not a trainpace\.Meter keyword"):
        TrainpaceCallback(windw=10)


def test_without_transformers_the_error_names_the_extra(monkeypatch):
    import builtins
    import importlib
    import sys

    real_import = builtins.__import__

    def no_transformers(name, *args, **kwargs):
        if name.split(".")[0] == "transformers":
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.delitem(sys.modules, "trainpace.integrations.huggingface")
    monkeypatch.setattr(builtins, "__import__", no_transformers)
    with pytest.raises(trainpace.MissingDependencyError,
                       match=r"pip install 'trainpace\[huggingface\]'"):
        importlib.import_module("trainpace.integrations.huggingface")


class RealClock:
    """The real clock, for the collate (which adds no delay of its own on it)."""

    def __call__(self):
        return time.perf_counter()

    def advance(self, seconds):
        assert seconds == 0.0


class IterationTimer(transformers.TrainerCallback):
    """Independent timer on the real clock (a callback before trainpace's): when each step's
    work began, and when training ended (before trainpace finishes its run)."""

    def __init__(self):
        self.begins = []
        self.end = None

    def on_step_begin(self, args, state, control, **kwargs):
        self.begins.append(time.perf_counter())

    def on_train_end(self, args, state, control, **kwargs):
        self.end = time.perf_counter()


def test_a_real_run_is_measured_within_2_percent_of_its_own_timer(tmp_path):
    """The real clock, HF logging every 5 steps (its loss read, its progress): every second
    from the first measured step's work to the end of training is in the measured steps."""
    steps, warmup = 150, 5  # about 1 s measured: a few ms at an end stay well inside 2%
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=64, n_positions=32, n_embd=32, n_layer=1,
                                     n_head=2)
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "hf"), per_device_train_batch_size=BATCH, max_steps=steps,
        logging_steps=5, save_strategy="no", report_to="none", use_cpu=True,
        dataloader_num_workers=0, disable_tqdm=True, remove_unused_columns=False)
    callback = TrainpaceCallback(tmp_path / "run", window=10, warmup=warmup, console=False,
                                 report=False, count_flops=False)
    timer = IterationTimer()
    trainer = transformers.Trainer(
        model=transformers.GPT2LMHeadModel(config), args=args,
        train_dataset=dataset(steps * BATCH, 1), data_collator=PadCollate(0.0, [], RealClock()),
        callbacks=[timer, callback])
    trainer.train()
    summary = callback.summary
    assert summary.steps.measured == steps - warmup
    truth = BATCH * (steps - warmup) / (timer.end - timer.begins[warmup])
    assert summary.throughput.samples_per_s / truth == pytest.approx(1.0, abs=0.02)


@pytest.mark.slow
def test_under_ddp_the_job_is_measured_within_2_percent_of_its_ranks_timers(tmp_path):
    """``torchrun`` of 2 CPU processes: one job folder (``rank{r}/`` in it, the CPU device
    taken as it comes from the Trainer, "cpu:0"), the global samples/s the sum of samples over
    the slowest rank's steps."""
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).with_name("hf_fit.py")
    torchrun = Path(sys.executable).with_name("torchrun")
    done = subprocess.run([str(torchrun), "--nproc_per_node=2", str(script), str(tmp_path)],
                          timeout=400, capture_output=True, text=True, check=False,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    job = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert job["world_size"] == 2
    assert sorted(p.name for p in (tmp_path / "run").glob("rank*")) == ["rank0", "rank1"]
    truths = [json.loads((tmp_path / f"truth{rank}.json").read_text()) for rank in (0, 1)]
    truth = sum(t["samples"] for t in truths) / max(t["seconds"] for t in truths)
    assert job["throughput"]["samples_per_s"] / truth == pytest.approx(1.0, abs=0.02)
    assert job["time"]["outside_steps_pct"] < 1.0  # no evaluation, no save
