"""Who this process is in a distributed job: rank, local rank, world size, node, host.

The torch.distributed launch environment (torchrun's variables: ``RANK``, ``LOCAL_RANK``,
``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``GROUP_RANK``) says it before any process group
exists; an initialized default group says it when a launcher set no variables. A process
with neither is a single-process run (``world_size`` 1).
"""

from __future__ import annotations

import socket
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

RANK_FOLDER_PREFIX = "rank"


@dataclass(frozen=True, kw_only=True)
class RankInfo:
    """This process's place in the job (``world_size`` 1 when it is not distributed)."""

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    local_world_size: int = 1
    node: int = 0  # torchrun's GROUP_RANK: which agent (node) launched this process
    host: str | None = None
    master_addr: str | None = None
    master_port: int | None = None
    restart: int = 0  # TORCHELASTIC_RESTART_COUNT: a restarted job is a new exchange

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def _int(env: Mapping[str, str], key: str) -> int | None:
    value = env.get(key)
    if value is None or not value.strip().lstrip("-").isdigit():
        return None
    return int(value)


def rank_info(env: Mapping[str, str] | None = None, *, host: str | None = None) -> RankInfo:
    """This process's rank from the launch environment, else from torch.distributed."""
    import os

    env = os.environ if env is None else env
    host = host if host is not None else socket.gethostname()
    rank, world = _int(env, "RANK"), _int(env, "WORLD_SIZE")
    if rank is None or world is None:
        rank, world = _from_torch()
    if rank is None or world is None or world < 1 or not 0 <= rank < world:
        return RankInfo(host=host)
    local = _int(env, "LOCAL_RANK")
    local_world = _int(env, "LOCAL_WORLD_SIZE")
    node = _int(env, "GROUP_RANK")
    return RankInfo(
        rank=rank,
        local_rank=local if local is not None else rank,
        world_size=world,
        local_world_size=local_world if local_world is not None else world,
        node=node if node is not None else 0,
        host=host,
        master_addr=env.get("MASTER_ADDR") or None,
        master_port=_int(env, "MASTER_PORT"),
        restart=_int(env, "TORCHELASTIC_RESTART_COUNT") or 0,
    )


def _from_torch() -> tuple[int | None, int | None]:
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return int(dist.get_rank()), int(dist.get_world_size())
    except Exception:  # noqa: BLE001 - no process group is an answer, not an error
        pass
    return None, None


def rank_folder(run_folder: Path, rank: int) -> Path:
    """Where rank ``rank`` writes inside the run folder: ``run/rank{r}``."""
    return run_folder / f"{RANK_FOLDER_PREFIX}{rank}"


def folder_rank(path: Path) -> int | None:
    """The rank a ``rank{r}`` folder belongs to, or None when the name is not one."""
    name = path.name
    digits = name[len(RANK_FOLDER_PREFIX):]
    if not name.startswith(RANK_FOLDER_PREFIX) or not digits.isdigit():
        return None
    return int(digits)


def rank_folders(run_folder: Path) -> dict[int, Path]:
    """The ``rank{r}/`` subfolders of a run folder, by rank (empty when it has none)."""
    if not run_folder.is_dir():
        return {}
    found = {}
    for child in run_folder.iterdir():
        rank = folder_rank(child)
        if rank is not None and child.is_dir():
            found[rank] = child
    return dict(sorted(found.items()))
