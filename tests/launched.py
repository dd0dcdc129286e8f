"""Ending a launched job whole: torchrun gives each worker a session of its own, out of reach
of a killpg of the launcher's group (a hung or stopped rank was left behind)."""

import contextlib
import os
import signal

import psutil


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
