"""A job's other ranks on this host: CPU that is the job's own, not other processes'.

Several ranks of one job on a host (``torchrun --nproc_per_node=N``,
``torch.multiprocessing.spawn``) each see the machine busy with processes that are not
themselves; those are the job's own ranks, not "other processes". The rule that tells them:

- **When to look.** This process is one of several local ranks of a job when its launch
  environment says so (``LOCAL_WORLD_SIZE`` > 1, as torchrun and launchers following it
  set; without it, ``WORLD_SIZE`` > 1) or, with no such variable, an initialized
  torch.distributed group holds several ranks (``torch.multiprocessing.spawn`` sets none).
  ``LOCAL_WORLD_SIZE=1`` (one rank per host) or nothing at all: a single process, no search.
- **Who counts.** Its *sibling ranks* are the other children of its parent process (torchrun's
  agent, the process that called ``spawn``, the launcher's daemon) that run the same
  executable (``/proc/<pid>/exe``) and started with the same job in their environment
  (``/proc/<pid>/environ``: the values of :data:`JOB_VARIABLES`, absent ones alike; this
  process's own are read there too, so a rank that sets ``MASTER_PORT`` after it started
  still matches its siblings). The launcher itself is not counted (it waits on the ranks).
  multiprocessing's resource tracker, a child of the spawning process running the same
  Python with the same environment, passes the rule: it is the job's own helper, and idle.

A process that cannot be read (another user's, gone) is not a sibling: its CPU stays
"others", as it was before the rule. Ranks of the same job under another parent (two
``torchrun`` agents on one host, one per node of a multi-node job), or each started through a
wrapper of its own (a shell per rank), are not found: their CPU stays others'.

Linux only: the children come from the kernel's ``/proc/<pid>/task/<tid>/children`` lists
(psutil's scan where the kernel keeps none). Each child is judged once (its pid's verdict is
kept while it stays a child); the lists are read again at every :meth:`SiblingRanks.find`,
so a rank restarted by its launcher is found again.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping

from trainpace.sampling.procfs import LIST_BYTES, ProcFiles, children_pids, read_bytes

__all__ = ["JOB_VARIABLES", "SiblingRanks", "parent_pid", "several_local_ranks"]

# The variables that name a job in a rank's environment: the run of the elastic agent, the
# rendezvous point. Their values (absent included) are the job's identity.
JOB_VARIABLES: tuple[bytes, ...] = (b"TORCHELASTIC_RUN_ID", b"MASTER_ADDR", b"MASTER_PORT")
ENVIRON_BYTES = 1 << 20  # a process's environment, read once per candidate

Identity = tuple[str, tuple[bytes | None, ...]]  # (executable, the job variables' values)


def several_local_ranks(env: Mapping[str, str] | None = None) -> bool:
    """Whether this process is one of several ranks that may share its host (module
    docstring: when to look)."""
    env = os.environ if env is None else env
    for key in ("LOCAL_WORLD_SIZE", "WORLD_SIZE"):
        value = env.get(key, "").strip()
        if value.isdigit():
            return int(value) > 1
    return _torch_world_size() > 1


def _torch_world_size() -> int:
    """The initialized default group's size; 1 without one (torch is never imported here)."""
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return int(dist.get_world_size())
    except Exception:  # noqa: BLE001 - no usable group is an answer, not an error
        pass
    return 1


def parent_pid(data: bytes | None) -> int | None:
    """The parent's pid from a ``/proc/<pid>/stat`` line (the field after the state, counted
    from the last ``)`` as the name may hold any)."""
    if not data:
        return None
    fields = data[data.rfind(b")") + 2:].split(None, 2)
    try:
        return int(fields[1])
    except (IndexError, ValueError):
        return None


def _job_values(environ: bytes) -> tuple[bytes | None, ...]:
    found: dict[bytes, bytes] = {}
    for entry in environ.split(b"\0"):
        name, sep, value = entry.partition(b"=")
        if sep and name in JOB_VARIABLES:
            found[name] = value
    return tuple(found.get(name) for name in JOB_VARIABLES)


class SiblingRanks:
    """This process's sibling ranks (module docstring: who counts), found again at each
    :meth:`find`.

    ``children_of``: a process's children where the kernel keeps no children lists (psutil's
    scan; None: none found then).
    """

    def __init__(self, pid: int, *, proc: str = "/proc",
                 children_of: Callable[[int], list[int]] | None = None) -> None:
        self._pid = pid
        self._proc = proc
        self._children_of = children_of
        self._lists = ProcFiles()  # the parent's children lists, kept open between finds
        self._verdicts: dict[int, bool] = {}  # child pid -> is a sibling rank
        self._own: Identity | None = None

    def close(self) -> None:
        self._lists.close()

    def find(self) -> list[int]:
        """The sibling ranks' pids now ([] when there are none or they cannot be told)."""
        parent = parent_pid(read_bytes(f"{self._proc}/{self._pid}/stat"))
        if parent is None or parent == self._pid:
            return []
        children = [pid for pid in self._children(parent) if pid != self._pid]
        self._verdicts = {pid: self._verdicts[pid] if pid in self._verdicts
                          else self._is_sibling(pid) for pid in children}
        return [pid for pid, sibling in self._verdicts.items() if sibling]

    def _children(self, parent: int) -> list[int]:
        proc = self._proc
        try:
            tasks = os.listdir(f"{proc}/{parent}/task")
        except OSError:
            return []
        paths = [f"{proc}/{parent}/task/{task}/children" for task in tasks]
        if paths and not os.path.exists(paths[0]):
            return self._children_of(parent) if self._children_of is not None else []
        self._lists.forget_all_but(set(paths))
        return [pid for path in paths for pid in children_pids(self._lists.read(path, LIST_BYTES))]

    def _identity(self, pid: int) -> Identity | None:
        try:
            exe = os.readlink(f"{self._proc}/{pid}/exe")
        except OSError:
            return None
        environ = read_bytes(f"{self._proc}/{pid}/environ", ENVIRON_BYTES)
        return None if environ is None else (exe, _job_values(environ))

    def _is_sibling(self, pid: int) -> bool:
        if self._own is None:
            self._own = self._identity(self._pid)
        return self._own is not None and self._identity(pid) == self._own
