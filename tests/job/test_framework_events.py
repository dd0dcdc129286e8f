"""Lightning's and HF's own checkpoint saves and loads and their evaluation loops, in the job's
ledger, timed on the trainer's methods and hooks (no module function replaced)."""

import json

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from manual_clock import ManualClock
from trainpace.job.events import LEDGER_FILE

pytestmark = [
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
    pytest.mark.filterwarnings("ignore::UserWarning"),
]

VAL_S = 0.06  # each validation batch, on the manual clock


def events(folder):
    return [json.loads(line) for line in (folder / LEDGER_FILE).read_text().splitlines()]


def lightning_fit(tmp_path, clock, *, epochs, ckpt_path=None):
    pl = pytest.importorskip("lightning.pytorch")
    from trainpace.integrations.lightning import TrainpaceCallback

    class Tiny(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            clock.advance(0.01)
            x, y = batch
            return torch.nn.functional.mse_loss(self.layer(x), y)

        def validation_step(self, batch, batch_idx):
            clock.advance(VAL_S)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    data = TensorDataset(torch.randn(16, 4), torch.randn(16, 1))
    callback = TrainpaceCallback(tmp_path / "job", window=2, warmup=0, console=False,
                                 report=False, count_flops=False, clock=clock)
    trainer = pl.Trainer(accelerator="cpu", devices=1, max_epochs=epochs, limit_val_batches=2,
                         num_sanity_val_steps=2, enable_progress_bar=False, logger=False,
                         enable_model_summary=False, default_root_dir=tmp_path,
                         callbacks=[callback])
    save_checkpoint = type(trainer).save_checkpoint
    trainer.fit(Tiny(), DataLoader(data, batch_size=4), DataLoader(data, batch_size=4),
                ckpt_path=ckpt_path)
    assert "save_checkpoint" not in vars(trainer)  # the trainer's own method again
    assert type(trainer).save_checkpoint is save_checkpoint
    return trainer


def test_lightning_saves_validations_and_the_resuming_load(tmp_path, monkeypatch):
    clock = ManualClock()
    lightning_fit(tmp_path, clock, epochs=2)
    first = events(tmp_path / "job")
    saves = [e for e in first if e["event"] == "checkpoint_save"]
    # ModelCheckpoint's save at each epoch's end, after the epoch's 4 steps
    assert [(e["step"], e["source"]) for e in saves] == [(4, "lightning"), (8, "lightning")]
    assert saves[-1]["path"].endswith("epoch=1-step=8.ckpt")
    # the validations of the fit (not the sanity check before it): 2 batches each, exactly
    evaluations = [e for e in first if e["event"] == "evaluation"]
    assert [(e["duration_s"], e["source"]) for e in evaluations] == [
        (pytest.approx(2 * VAL_S), "lightning")] * 2
    # a fit resumed from that checkpoint in the same job (the first one finished: the
    # scheduler says it is the same job)
    monkeypatch.setenv("TRAINPACE_JOB", "continue")
    lightning_fit(tmp_path, clock, epochs=3, ckpt_path=saves[-1]["path"])
    second = [e for e in events(tmp_path / "job") if e["run"] == 2]
    (load,) = [e for e in second if e["event"] == "checkpoint_load"]
    assert (load["path"], load["saved_by_run"], load["saved_at_step"], load["source"]) == (
        saves[-1]["path"], 1, 8, "lightning")
    assert load["duration_s"] > 0
    (start,) = [e for e in second if e["event"] == "run_start"]
    assert start["run_id"] == "job.2"
    assert [e["step"] for e in second if e["event"] == "checkpoint_save"] == [4]


def hf_train(tmp_path, clock, *, max_steps, resume=None):
    transformers = pytest.importorskip("transformers")
    from trainpace.integrations.huggingface import TrainpaceCallback, TrainpaceTrainer

    class Trainer(TrainpaceTrainer, transformers.Trainer):
        pass

    def collate(items):
        clock.advance(0.01)
        ids = torch.tensor([item["input_ids"] for item in items])
        return {"input_ids": ids, "labels": ids}

    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=64, n_positions=16, n_embd=16, n_layer=1, n_head=2))
    model.register_forward_pre_hook(lambda *_: clock.advance(0.015))
    data = [{"input_ids": list(range(1, 9))}] * 64
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "hf"), per_device_train_batch_size=4,
        per_device_eval_batch_size=4, max_steps=max_steps, eval_strategy="steps", eval_steps=4,
        save_strategy="steps", save_steps=4, report_to="none", use_cpu=True,
        dataloader_num_workers=0, disable_tqdm=True, remove_unused_columns=False)
    callback = TrainpaceCallback(tmp_path / "job", window=2, warmup=0, console=False,
                                 report=False, count_flops=False, clock=clock)
    Trainer(model=model, args=args, train_dataset=data, eval_dataset=data[:8],
            data_collator=collate, callbacks=[callback]).train(resume_from_checkpoint=resume)


def test_hf_saves_evaluations_and_the_resuming_loads_with_the_mixin(tmp_path, monkeypatch):
    clock = ManualClock()
    hf_train(tmp_path, clock, max_steps=8)
    first = events(tmp_path / "job")
    saves = [e for e in first if e["event"] == "checkpoint_save"]
    assert [(e["step"], e["path"], e["source"]) for e in saves] == [
        (4, str(tmp_path / "hf" / "checkpoint-4"), "hf"),
        (8, str(tmp_path / "hf" / "checkpoint-8"), "hf")]
    # each evaluation: 2 batches collated and run forward, exactly (the manual clock)
    evaluations = [e for e in first if e["event"] == "evaluation"]
    assert [(e["duration_s"], e["source"]) for e in evaluations] == [
        (pytest.approx(2 * (0.01 + 0.015)), "hf")] * 2
    monkeypatch.setenv("TRAINPACE_JOB", "continue")
    hf_train(tmp_path, clock, max_steps=12, resume=str(tmp_path / "hf" / "checkpoint-8"))
    second = [e for e in events(tmp_path / "job") if e["run"] == 2]
    loads = [e for e in second if e["event"] == "checkpoint_load"]
    # the weights, then the optimizer's and scheduler's state: both of the save of step 8
    assert [(e["path"], e["saved_by_run"], e["saved_at_step"]) for e in loads] == [
        (str(tmp_path / "hf" / "checkpoint-8"), 1, 8)] * 2
    assert [e["step"] for e in second if e["event"] == "checkpoint_save"] == [4]


class Stamps:
    """A callback that notes the real time of each HF hook it gets."""

    def __init__(self):
        self.calls = []

    def __getattr__(self, name):
        import time

        if not name.startswith("on_"):
            raise AttributeError(name)
        return lambda *args, **kwargs: self.calls.append((name, time.time()))


def test_hf_saves_timed_by_the_callback_alone_bound_hf_own_save(tmp_path, monkeypatch):
    """No mixin: each save is timed from the end of the last hook before it (an upper bound,
    said so), checked against a timer of Trainer._save_checkpoint itself; the resuming load is
    written untimed, naming the save it came from."""
    import time

    transformers = pytest.importorskip("transformers")
    from trainpace.integrations.huggingface import TrainpaceCallback

    truth = []
    save_checkpoint = transformers.Trainer._save_checkpoint

    def timed_save(self, model, trial):
        start = time.time()
        save_checkpoint(self, model, trial)
        truth.append((self.state.global_step, start, time.time()))

    monkeypatch.setattr(transformers.Trainer, "_save_checkpoint", timed_save)

    def train(max_steps, resume=None):
        torch.manual_seed(0)
        model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
            vocab_size=64, n_positions=16, n_embd=16, n_layer=1, n_head=2))
        data = [{"input_ids": list(range(1, 9)), "labels": list(range(1, 9))}] * 64
        args = transformers.TrainingArguments(
            output_dir=str(tmp_path / "hf"), per_device_train_batch_size=4,
            per_device_eval_batch_size=4, max_steps=max_steps, eval_strategy="steps",
            eval_steps=4, save_strategy="steps", save_steps=4, logging_steps=2,
            report_to="none", use_cpu=True, dataloader_num_workers=0, disable_tqdm=True)
        before, after = Stamps(), Stamps()
        callback = TrainpaceCallback(tmp_path / "job", window=2, warmup=0, console=False,
                                     report=False, count_flops=False)
        trainer = transformers.Trainer(
            model=model, args=args, train_dataset=data, eval_dataset=data[:8],
            callbacks=[before, callback, after])
        trainer.train(resume_from_checkpoint=resume)
        return before.calls, after.calls

    before, after = train(8)
    saves = [e for e in events(tmp_path / "job") if e["event"] == "checkpoint_save"]
    assert [(e["step"], e["path"], e["source"]) for e in saves] == [
        (4, str(tmp_path / "hf" / "checkpoint-4"), "hf"),
        (8, str(tmp_path / "hf" / "checkpoint-8"), "hf")]
    assert [step for step, _, _ in truth] == [4, 8]
    tolerance_s = 1e-3  # the ledger's Unix times come from perf_counter plus one offset
    for event, (_, start, end) in zip(saves, truth, strict=True):
        # HF's order: ... on_evaluate, _save_checkpoint, on_save; the bound begins where our
        # on_evaluate ended: after the callback before ours got it, before the save began
        (hook_s,) = [t for name, t in before if name == "on_evaluate" and t < start][-1:]
        (on_save_s,) = [t for name, t in after if name == "on_save" and t > end][:1]
        assert "upper bound" in event["timing"] and "on_evaluate" in event["timing"]
        assert hook_s - tolerance_s <= event["unix_s"] <= start + tolerance_s
        assert end - tolerance_s <= event["unix_s"] + event["duration_s"] <= on_save_s + tolerance_s

    monkeypatch.setenv("TRAINPACE_JOB", "continue")
    train(12, resume=str(tmp_path / "hf" / "checkpoint-8"))
    second = [e for e in events(tmp_path / "job") if e["run"] == 2]
    (load,) = [e for e in second if e["event"] == "checkpoint_load"]
    assert (load["path"], load["saved_by_run"], load["saved_at_step"], load["duration_s"]) == (
        str(tmp_path / "hf" / "checkpoint-8"), 1, 8, None)
    assert "not timed" in load["timing"]
    assert [e["step"] for e in second if e["event"] == "checkpoint_save"] == [4]
