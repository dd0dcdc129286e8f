"""The window-boundary exchange: each rank posts its window record; rank 0 reads them all.

It goes through the job's key-value store (torchrun's TCPStore at ``MASTER_ADDR:MASTER_PORT``,
the one torch.distributed's process groups rendezvous through), under a ``trainpace/`` prefix,
from the writer thread, at window boundaries only. It is deliberately not a collective, on
any group: a collective waits for every rank, and a gloo group is broken for good once one
peer dies (every later call on it fails), while here a rank that dies or hangs is simply a
rank whose key stops changing. So:

- no per-step traffic, no device sync, nothing on the training's process groups;
- every store call is bounded by ``timeout_s`` (connecting included); a failure disables the
  exchange for the rest of the run (logged once by the caller) and training goes on;
- rank 0 never waits for a slow rank during the run: it merges what has arrived and scores a
  window without the ranks two windows behind; at the end it waits at most ``timeout_s``
  without news before naming the ranks that never sent their last window.

Keys: ``agree/{key}`` (what rank 0 decided, e.g. the run folder's name), then, under the run
folder's name, ``last/{rank}`` (the newest window a rank posted) and ``w/{rank}/{window % RING}``
(the record), so the store holds at most ``RING`` records per rank without any deletes. Rank 0
reads all ranks' ``last`` keys in one ``multi_get`` and the new records in a second one:
two round trips per window, whatever the world size.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable
from typing import Any, Protocol

import orjson

from trainpace.dist.merge import WindowRecord
from trainpace.dist.ranks import RankInfo

RING = 8  # records kept per rank in the store; rank 0 reads every window, 8 is slack
PREFIX = "trainpace"


class Store(Protocol):
    """The part of ``torch.distributed.Store`` the exchange uses."""

    def set(self, key: str, value: bytes | str) -> None: ...

    def get(self, key: str) -> bytes: ...

    def check(self, keys: list[str]) -> bool: ...

    def multi_get(self, keys: list[str]) -> list[bytes]: ...

    def multi_set(self, keys: list[str], values: list[bytes | str]) -> None: ...


def tcp_store(info: RankInfo, timeout_s: float) -> Store:
    """A client of the job's TCPStore, under trainpace's prefix (one per restart)."""
    from torch.distributed import PrefixStore, TCPStore  # type: ignore[attr-defined]

    if info.master_addr is None or info.master_port is None:
        raise ConnectionError("MASTER_ADDR/MASTER_PORT are not set: no store to exchange "
                              "through (run under torchrun)")
    store = TCPStore(info.master_addr, info.master_port, is_master=False,
                     timeout=_dt.timedelta(seconds=timeout_s), wait_for_workers=False)
    prefixed: Store = PrefixStore(f"{PREFIX}/{info.restart}", store)  # type: ignore[assignment]
    return prefixed


class Exchange:
    """One rank's end of the exchange; the store is made on first use (the writer thread)."""

    def __init__(self, info: RankInfo, *, timeout_s: float = 10.0,
                 connect: Callable[[RankInfo, float], Store] = tcp_store) -> None:
        self.info = info
        self.timeout_s = timeout_s
        self._connect = connect
        self._store: Store | None = None
        self._seen: dict[int, int] = {}  # rank 0: the newest window read from each rank
        # The run's keys sit under its folder's name, so two Meters of one job (one run
        # folder each) do not read each other's windows.
        self.namespace = ""

    @property
    def store(self) -> Store:
        if self._store is None:
            self._store = self._connect(self.info, self.timeout_s)
        return self._store

    # -- every rank ------------------------------------------------------------------------

    def post(self, record: WindowRecord) -> None:
        """Publish this rank's window record (one round trip)."""
        rank, window = record["rank"], record["window"]
        ns = self.namespace
        self.store.multi_set([f"{ns}w/{rank}/{window % RING}", f"{ns}last/{rank}"],
                             [orjson.dumps(record), str(window)])

    def agree(self, key: str, value: str | None) -> str:
        """Rank 0 sets ``key`` to ``value``; every other rank reads it (bounded wait)."""
        if self.info.rank == 0:
            assert value is not None
            self.store.set(f"agree/{key}", value)
            return value
        return self.store.get(f"agree/{key}").decode()

    # -- rank 0 ----------------------------------------------------------------------------

    def collect(self) -> list[WindowRecord]:
        """The records posted since the last call, every rank (rank 0's job; never blocks
        on a rank that has not posted: its ``last`` key is checked before it is read)."""
        store = self.store
        world = self.info.world_size
        ns = self.namespace
        keys = [f"{ns}last/{r}" for r in range(world)]
        if len(self._seen) == world or store.check(keys):
            present = list(range(world))
        else:  # some ranks have not posted yet (or never will): ask for those one by one
            present = [r for r in range(world) if r in self._seen or store.check([keys[r]])]
        lasts = store.multi_get([keys[r] for r in present]) if present else []
        wanted: list[tuple[int, int]] = []
        for rank, raw in zip(present, lasts, strict=True):
            newest = int(raw)
            first = max(self._seen.get(rank, 0) + 1, newest - RING + 1)
            wanted.extend((rank, w) for w in range(first, newest + 1))
            self._seen[rank] = newest
        if not wanted:
            return []
        values = store.multi_get([f"{ns}w/{r}/{w % RING}" for r, w in wanted])
        out: list[WindowRecord] = []
        for (_rank, window), raw in zip(wanted, values, strict=True):
            record: dict[str, Any] = orjson.loads(raw)
            if record.get("window") == window:  # not overwritten by a newer lap of the ring
                out.append(record)  # type: ignore[arg-type]
        return out
