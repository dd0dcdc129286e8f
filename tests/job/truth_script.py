"""A training script that knows its own timings (the truth the job ledger is checked against).

Usage: truth_script.py WORKDIR  (the same command for the run it SIGKILLs and for the restart)

It trains STEPS steps with a checkpoint every SAVE_EVERY and an evaluation every EVAL_EVERY;
the first run (no checkpoint yet) SIGKILLs itself when KILL_AT steps are done; the restart
loads the last checkpoint and finishes. Each fact it measures itself is appended at once to
WORKDIR/truth.jsonl (so the kill loses none): its start, the first step's start, each save
and load (start, duration, step), the steps done when it was killed.

TRUTH_METER=1 in the environment: it uses ``trainpace.Meter(checkpoints=True)``; else it knows
nothing of trainpace (run it under ``trainpace run``).
"""

import time

STARTED_UNIX_S = time.time()  # before any import: the closest the script gets to its start

import contextlib  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402
import sys  # noqa: E402

import torch  # noqa: E402

STEPS, SAVE_EVERY, EVAL_EVERY, KILL_AT = 30, 7, 9, 26
STEP_S = 0.03  # each step also waits this long (a device's step, as seen by the host)

workdir = sys.argv[1]
checkpoint = os.path.join(workdir, "ckpt.pt")
truth = open(os.path.join(workdir, "truth.jsonl"), "a")  # noqa: SIM115 - kept open


def note(**fact):
    truth.write(json.dumps(fact) + "\n")
    truth.flush()


note(fact="start", unix_s=STARTED_UNIX_S)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
data = torch.utils.data.DataLoader(torch.randn(STEPS * 8, 512), batch_size=8)

meter = None
if os.environ.get("TRUTH_METER") == "1":
    import trainpace

    meter = trainpace.Meter(out=os.path.join(workdir, "job"), window=10, console=False,
                            report=False, checkpoints=True)

done = 0  # the job's steps done so far (the run's own are counted from its start)
if os.path.exists(checkpoint):
    started = time.time()
    state = torch.load(checkpoint)
    note(fact="load", unix_s=started, duration_s=time.time() - started, step=state["step"])
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    done = state["step"]

batches = meter.loader(data) if meter is not None else data
note(fact="first_step", unix_s=time.time())
for batch in batches:
    if done == STEPS:
        break
    if done == KILL_AT and not os.path.exists(os.path.join(workdir, "killed")):
        open(os.path.join(workdir, "killed"), "w").close()
        note(fact="killed", steps_done=done)
        os.kill(os.getpid(), signal.SIGKILL)
    with meter.step() if meter is not None else contextlib.nullcontext():
        model(batch).square().mean().backward()
        optimizer.step()
        optimizer.zero_grad()
        time.sleep(STEP_S)
    done += 1
    if done % SAVE_EVERY == 0:
        started = time.time()
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                    "step": done}, checkpoint)
        note(fact="save", unix_s=started, duration_s=time.time() - started, step=done)
    if done % EVAL_EVERY == 0:
        with torch.no_grad():
            model(torch.randn(64, 512)).sum()
if meter is not None:
    meter.finish()
note(fact="end", unix_s=time.time(), steps_done=done)
