"""What the tuner leaves behind: its worker processes, found with psutil."""

from __future__ import annotations

import psutil


def children() -> list[psutil.Process]:
    """Live child processes of this test process."""
    alive = []
    for proc in psutil.Process().children(recursive=True):
        try:
            # multiprocessing's resource tracker (and forkserver) live as long as the test
            # process once anything used the spawn context: they are not a loader's workers
            helper = any(name in " ".join(proc.cmdline())
                         for name in ("resource_tracker", "forkserver"))
            if proc.status() != psutil.STATUS_ZOMBIE and not helper:
                alive.append(proc)
        except psutil.NoSuchProcess:
            continue
    return alive
