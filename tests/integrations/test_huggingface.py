"""The Hugging Face callback on real ``Trainer.train()`` runs of a tiny GPT-2 built from a
config (no download), padded variable-length batches, on a manual clock that the collate
advances by a known delay (so the time figures are known exactly, whatever the machine's
load), checked against an independent timer and token count recorded in the same run."""

import json
import statistics
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
    """Independent timer: when each optimizer step ended (after trainpace's callback)."""

    def __init__(self, clock):
        self.ends = []
        self.clock = clock

    def on_step_end(self, args, state, control, **kwargs):
        self.ends.append(self.clock())


def train(tmp_path, trainer_class=None, **options):
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
        max_steps=STEPS, eval_strategy="steps", eval_steps=4, logging_steps=2,
        save_strategy="no", report_to="none", use_cpu=True, dataloader_num_workers=0,
        disable_tqdm=True, learning_rate=1e-3, remove_unused_columns=False,
    )
    callback = TrainpaceCallback(tmp_path / "run", window=4, warmup=2, console=False,
                                 report=False, count_flops=False, clock=clock, **options)
    timer = StepTimes(clock)
    trainer = (trainer_class or transformers.Trainer)(
        model=model, args=args, train_dataset=dataset(STEPS * BATCH * ACCUMULATE, 1),
        eval_dataset=dataset(2 * BATCH, 2), data_collator=PadCollate(LOAD_S, fetches, clock),
        callbacks=[callback, timer],
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
        [LOAD_S * len(step_collates(fetched, s)) + ACCUMULATE * FORWARD_S for s in range(STEPS)])
    truth_rate = ACCUMULATE * BATCH * len(truth[2:]) / sum(truth[2:])  # warm-up: 2 steps
    assert callback.summary.throughput.samples_per_s == pytest.approx(truth_rate)
    # the evaluation after step 4: two batches collated and run forward
    assert [s["outside_s"] for s in steps] == pytest.approx(
        [0.0] * 4 + [2 * (LOAD_S + FORWARD_S)] + [0.0] * 3, abs=1e-9)


def test_window_figures_reach_the_logs_with_the_mixin(tmp_path):
    class Trainer(TrainpaceTrainer, transformers.Trainer):
        pass

    trainer, _callback, _timer, _fetches, steps = train(tmp_path, Trainer)
    logged = [entry for entry in trainer.state.log_history if "trainpace/time/step_median_ms" in entry]
    assert logged, trainer.state.log_history
    for entry in logged:
        assert "loss" in entry  # a training log event, with HF's own figures
        assert entry["trainpace/time/step_median_ms"] > 0
    window = [s["step_s"] for s in steps[:4] if s["step"] > 2]
    assert logged[0]["trainpace/time/step_median_ms"] == pytest.approx(1e3 * statistics.median(window))


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
