"""A process as a job knows it: its pid, host and the OS's start time of it.

The start time tells a process from a later one given the same pid (pids are reused), so "the
process of that run is gone" is a fact, not a guess.
"""

from __future__ import annotations

import os
import re
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass

import psutil

# The same process's start read twice differs by the clocks' reading jitter (well under a
# tick); another process given the pid later started at least this much apart.
SAME_START_S = 0.5


@dataclass(frozen=True)
class ProcessId:
    """Who made a run: ``pid`` on ``host``, started at ``start_unix_s`` (None: unknown)."""

    pid: int
    host: str
    start_unix_s: float | None


def this_process() -> ProcessId:
    """This process, with the OS's start time of it."""
    process = psutil.Process()
    return ProcessId(process.pid, socket.gethostname(), _start_of(process))


def _start_of(process: psutil.Process) -> float | None:
    """The OS's start time of ``process`` in Unix seconds. On Linux from the kernel's own
    count (clock ticks since boot) against the boot clock now: to a tick, where psutil's
    figure rests on a boot time rounded to the second."""
    try:
        with open(f"/proc/{process.pid}/stat", "rb") as stat:
            fields = stat.read().rpartition(b")")[2].split()
        ticks = int(fields[19])  # field 22, starttime; fields[0] is field 3
        since_start_s = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / _TICKS_PER_S
        return time.time() - since_start_s
    except (OSError, ValueError, IndexError, AttributeError):
        pass  # not Linux: the portable figure
    try:
        return float(process.create_time())
    except (psutil.Error, OSError):
        return None


_TICKS_PER_S = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def running(who: ProcessId) -> bool | None:
    """Whether ``who`` still runs: True, False, or None when this host cannot tell (another
    host's process)."""
    if who.host != socket.gethostname():
        return None
    try:
        process = psutil.Process(who.pid)
    except psutil.NoSuchProcess:
        return False
    except (psutil.Error, OSError):
        return True  # there, but not ours to look at
    if who.start_unix_s is None:
        return True
    start = _start_of(process)
    if start is None:
        return True
    if abs(start - who.start_unix_s) > SAME_START_S:
        return False  # the pid now belongs to a later process
    try:
        return bool(process.status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False
    except (psutil.Error, OSError):
        return True


# Words in an argument's name that say its value is a credential (``--api-key``,
# ``--hf_token``, ``db.password=``); whole words, so ``--max-tokens`` keeps its value.
_SECRET_WORDS = frozenset({"key", "apikey", "token", "secret", "password", "passwd"})
REDACTED = "<redacted>"


def _names_secret(name: str) -> bool:
    return any(word in _SECRET_WORDS for word in re.split(r"[^a-z0-9]+", name.lower()))


def redacted_argv(argv: Sequence[str]) -> list[str]:
    """``argv`` with the values of credential arguments replaced: ``--x=V``, ``x=V`` and
    ``--x V`` where x names a key, token, secret or password (meta.json is shared)."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next and not arg.startswith("--"):
            out.append(REDACTED)
            hide_next = False
            continue
        hide_next = False
        name, equals, _ = arg.partition("=")
        if equals and _names_secret(name):
            out.append(f"{name}={REDACTED}")
        elif not equals and arg.startswith("-") and _names_secret(arg):
            out.append(arg)
            hide_next = True
        else:
            out.append(arg)
    return out


def job_command(argv: Sequence[str]) -> list[str]:
    """The command as a job's ledger keeps it (and a restart is compared by): the script's
    path resolved, credentials hidden."""
    words = list(argv)
    if words and words[0] and os.path.exists(words[0]):
        words[0] = os.path.realpath(words[0])
    return redacted_argv(words)
