"""A Lightning fit or an HF Trainer run that knows its own timings (the truth the job ledger is
checked against): trained, checkpointed, SIGKILLed mid-way, restarted, resumed, finished.

Usage: framework_truth_script.py lightning|hf WORKDIR [fetched|stepped]  (the same command for
the run it SIGKILLs and for the restart)

It trains STEPS optimizer steps of a tiny model built from code (nothing downloaded), with
the framework's own checkpoint every SAVE_EVERY steps and its evaluation every EVAL_EVERY; the
first run (no checkpoint yet) SIGKILLs itself when KILL_AT steps are done, after the next
batch was fetched (``fetched``, the default) or before (``stepped``: right after the optimizer
step, in the framework's hook after trainpace's, as a kill in the framework's own work after a
step would land); the restart resumes
from the framework's last checkpoint and finishes. Each fact it measures itself, with timers
of its own around the framework's methods, is appended at once to WORKDIR/truth.jsonl: its
start, the first step's start, each save, load and evaluation (start, duration, the job's
step), the steps done when it was killed, the end.
"""

import time

STARTED_UNIX_S = time.time()  # before any import: the closest the script gets to its start

import json  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402
import sys  # noqa: E402
import warnings  # noqa: E402

import torch  # noqa: E402

STEPS, SAVE_EVERY, EVAL_EVERY, KILL_AT = 30, 7, 9, 26
STEP_S = 0.03  # each step also waits this long (a device's step, as seen by the host)
BATCH = 4

framework, workdir = sys.argv[1], sys.argv[2]
kill_when = sys.argv[3] if len(sys.argv) > 3 else "fetched"
truth = open(os.path.join(workdir, "truth.jsonl"), "a")  # noqa: SIM115 - kept open
killed_marker = os.path.join(workdir, "killed")


def note(**fact):
    truth.write(json.dumps(fact) + "\n")
    truth.flush()


def timed(fact, call, *args, step=None, **kwargs):
    started = time.time()
    result = call(*args, **kwargs)
    note(fact=fact, unix_s=started, duration_s=time.time() - started, step=step)
    return result


class Steps:
    """The first step's start, and the SIGKILL of the first run when KILL_AT steps are done:
    as the next step begins (its batch fetched: trainpace closed the step there), or as the
    optimizer stepped (trainpace's step still open until the next fetch)."""

    def __init__(self):
        self.seen = False

    def begins(self, global_step):
        if not self.seen:
            self.seen = True
            note(fact="first_step", unix_s=time.time())
        if kill_when == "fetched":
            self.kill_at(global_step)

    def stepped(self, global_step):
        if kill_when == "stepped":
            self.kill_at(global_step)

    def kill_at(self, global_step):
        if global_step == KILL_AT and not os.path.exists(killed_marker):
            open(killed_marker, "w").close()
            note(fact="killed", steps_done=global_step)
            os.kill(os.getpid(), signal.SIGKILL)


note(fact="start", unix_s=STARTED_UNIX_S)
warnings.simplefilter("ignore")
torch.manual_seed(0)
torch.set_num_threads(1)
steps = Steps()


def lightning():
    import lightning.pytorch as pl
    from lightning.pytorch.callbacks import ModelCheckpoint
    from torch.utils.data import DataLoader, TensorDataset

    from trainpace.integrations.lightning import TrainpaceCallback

    class Model(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(),
                                           torch.nn.Linear(256, 1))

        def training_step(self, batch, batch_idx):
            time.sleep(STEP_S)
            x, y = batch
            return torch.nn.functional.mse_loss(self.net(x), y)

        def validation_step(self, batch, batch_idx):
            x, y = batch
            return torch.nn.functional.mse_loss(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=1e-3)

    class Checkpoints(ModelCheckpoint):
        def _save_checkpoint(self, trainer, filepath):
            timed("save", super()._save_checkpoint, trainer, filepath,
                  step=trainer.global_step)

    class Truth(pl.Callback):
        def setup(self, trainer, pl_module, stage):
            load = trainer.strategy.load_checkpoint  # before trainpace's own timer of it
            trainer.strategy.load_checkpoint = lambda *a, **k: timed("load", load, *a, **k)

        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            steps.begins(trainer.global_step)

        def on_validation_start(self, trainer, pl_module):
            self.validation_s = time.time()

        def on_validation_end(self, trainer, pl_module):
            note(fact="evaluation", unix_s=self.validation_s,
                 duration_s=time.time() - self.validation_s, step=trainer.global_step)

    class Stepped(pl.Callback):  # after trainpace's callback: its hook has run
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            steps.stepped(trainer.global_step)

    data = TensorDataset(torch.randn(STEPS * BATCH, 64), torch.randn(STEPS * BATCH, 1))
    folder = os.path.join(workdir, "ckpts")
    saved = sorted(os.listdir(folder), key=lambda name: int(name[5:-5])) if os.path.isdir(
        folder) else []
    resume = os.path.join(folder, saved[-1]) if saved else None
    trainer = pl.Trainer(
        accelerator="cpu", devices=1, max_steps=STEPS, val_check_interval=EVAL_EVERY,
        check_val_every_n_epoch=None, limit_val_batches=4, num_sanity_val_steps=0,
        enable_progress_bar=False, logger=False, enable_model_summary=False,
        default_root_dir=workdir,
        callbacks=[Truth(), Checkpoints(dirpath=folder, filename="{step}", save_top_k=-1,
                                        every_n_train_steps=SAVE_EVERY),
                   TrainpaceCallback(os.path.join(workdir, "job"), window=10, console=False,
                                     report=False, count_flops=False), Stepped()])
    trainer.fit(Model(), DataLoader(data, batch_size=BATCH),
                DataLoader(data, batch_size=BATCH), ckpt_path=resume)
    return trainer.global_step


def hf():
    import transformers

    from trainpace.integrations.huggingface import TrainpaceCallback, TrainpaceTrainer

    class Trainer(TrainpaceTrainer, transformers.Trainer):
        pass

    class TruthTrainer(Trainer):  # the script's timers, around trainpace's
        def _save_checkpoint(self, model, trial):
            timed("save", super()._save_checkpoint, model, trial, step=self.state.global_step)

        def _load_from_checkpoint(self, *args, **kwargs):
            timed("load", super()._load_from_checkpoint, *args, **kwargs)

        def _load_optimizer_and_scheduler(self, *args, **kwargs):
            timed("load", super()._load_optimizer_and_scheduler, *args, **kwargs)

        def evaluate(self, *args, **kwargs):
            return timed("evaluation", super().evaluate, *args, step=self.state.global_step,
                         **kwargs)

    class Truth(transformers.TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            steps.begins(state.global_step)

    class Stepped(transformers.TrainerCallback):  # after trainpace's callback: its hook has run
        def on_step_end(self, args, state, control, **kwargs):
            steps.stepped(state.global_step)

    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=64, n_positions=16, n_embd=32, n_layer=1, n_head=2))
    model.register_forward_pre_hook(lambda *_: time.sleep(STEP_S) if model.training else None)
    data = [{"input_ids": list(range(1, 17)), "labels": list(range(1, 17))}] * (STEPS * BATCH)
    output = os.path.join(workdir, "hf")
    args = transformers.TrainingArguments(
        output_dir=output, per_device_train_batch_size=BATCH, per_device_eval_batch_size=BATCH,
        max_steps=STEPS, eval_strategy="steps", eval_steps=EVAL_EVERY, save_strategy="steps",
        save_steps=SAVE_EVERY, logging_steps=5, report_to="none", use_cpu=True,
        dataloader_num_workers=0, disable_tqdm=True)
    trainer = TruthTrainer(
        model=model, args=args, train_dataset=data, eval_dataset=data[:16],
        callbacks=[Truth(), TrainpaceCallback(os.path.join(workdir, "job"), window=10,
                                              console=False, report=False, count_flops=False),
                   Stepped()])
    resume = os.path.isdir(output) and any(name.startswith("checkpoint-")
                                           for name in os.listdir(output))
    trainer.train(resume_from_checkpoint=True if resume else None)
    return trainer.state.global_step


done = lightning() if framework == "lightning" else hf()
note(fact="end", unix_s=time.time(), steps_done=done)
