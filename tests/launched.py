"""Launched torchrun jobs: the exchange's bound for the jobs with a dead rank, and ending a
job whole (torchrun gives each worker a session of its own, out of reach of a killpg of the
launcher's group: a hung or stopped rank was left behind)."""

import contextlib
import os
import signal

import psutil

# The jobs with a rank killed, hung or stopped end when the others stop waiting for it: this
# bound (TRAINPACE_DIST_TIMEOUT_S) keeps them short. Healthy jobs keep the default (10 s), as
# a user's job does: on a CI machine at half speed, 3 s once left a healthy job's exchange
# dead (no window line at all).
DEAD_RANK_TIMEOUT_S = 3


def kill_job(job):
    """SIGKILL the launcher (its process group) and every process it started, and reap them."""
    try:
        workers = psutil.Process(job.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        workers = []
    with contextlib.suppress(ProcessLookupError):
        os.killpg(job.pid, signal.SIGKILL)
    for worker in workers:
        with contextlib.suppress(psutil.NoSuchProcess):
            worker.kill()
    job.wait(timeout=30)
    psutil.wait_procs(workers, timeout=30)
