"""The window-boundary exchange: each rank posts its window record; rank 0 reads them all.

It goes through the job's key-value store (torchrun's TCPStore at ``MASTER_ADDR:MASTER_PORT``,
the one torch.distributed's process groups rendezvous through), under a ``trainpace/`` prefix,
from the writer thread, at window boundaries only. It is deliberately not a collective, on
any group: a collective waits for every rank, and a gloo group is broken for good once one
peer dies (every later call on it fails), while here a rank that dies or hangs is simply a
rank whose key stops changing. So:

- no per-step traffic, no device sync, nothing on the training's process groups;
- every store call is bounded by ``timeout_s`` (connecting included): it runs on a helper
  thread that is waited for at most that long (:class:`BoundedStore`), since a store whose
  server is stopped (a suspended agent) leaves a call blocked in the socket whatever the
  store's own timeout says. A failure disables the exchange for the rest of the run (logged
  once by the caller) and training goes on;
- rank 0 never waits for a slow rank during the run: it merges what has arrived and scores a
  window without the ranks two windows behind; at the end it waits at most ``timeout_s``
  without news before naming the ranks that never sent their last window.

Keys: ``agree/{key}`` (what rank 0 decided, e.g. the run folder's name), then, under the run
folder's name, ``last/{rank}`` (the newest window a rank posted) and ``w/{rank}/{window % RING}``
(the record), so the store holds at most ``RING`` records per rank without any deletes. Rank 0
reads all ranks' ``last`` keys in one ``multi_get`` and the new records in a second one:
two round trips per window, whatever the world size. Past
:data:`~trainpace.dist.tree.FLAT_MAX_RANKS` ranks the merge has two levels
(:mod:`trainpace.dist.tree`): each node's leader reads its node's ranks the same way and
posts a node record (``node/last/{node}``, ``node/w/{node}/{seq % RING}``) and, now and
then, its ranks' entries (``view/{node}``); rank 0 reads the node records.
"""

from __future__ import annotations

import datetime as _dt
import queue
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

import orjson

from trainpace.dist.merge import WindowRecord
from trainpace.dist.ranks import RankInfo

T = TypeVar("T")

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


GRACE_S = 1.0  # beyond timeout_s: the store's own timeout answers first when it can
TIMEOUT_HINT = "TRAINPACE_DIST_TIMEOUT_S sets the bound"


class BoundedStore:
    """A store whose every call returns or raises within ``timeout_s`` (+ :data:`GRACE_S`).

    The calls run one at a time on one daemon thread of the store's own (started with the
    first call: a thread per call would cost the writer a thread's start at every window);
    the caller waits for each at most that long. One that does not come back in time raises
    ``TimeoutError`` and leaves the store dead (every later call raises at once): its thread
    stays blocked on the socket, never waited for again, and ends with the process.
    """

    def __init__(self, connect: Callable[[], Store], timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.dead: str | None = None  # why every call now fails at once
        self._connect = connect
        self._client: Store | None = None
        self._calls: queue.SimpleQueue[tuple[Callable[[], Any], list[Any],
                                             threading.Event]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    @property
    def _store(self) -> Store:
        assert self._client is not None  # connected by _bounded before any call
        return self._client

    def set(self, key: str, value: bytes | str) -> None:
        self._bounded(f"set {key}", lambda: self._store.set(key, value))

    def get(self, key: str) -> bytes:
        value: bytes = self._bounded(f"get {key}", lambda: self._store.get(key))
        return value

    def check(self, keys: list[str]) -> bool:
        present: bool = self._bounded("check", lambda: self._store.check(keys))
        return present

    def multi_get(self, keys: list[str]) -> list[bytes]:
        values: list[bytes] = self._bounded("multi_get", lambda: self._store.multi_get(keys))
        return values

    def multi_set(self, keys: list[str], values: list[bytes | str]) -> None:
        self._bounded("multi_set", lambda: self._store.multi_set(keys, values))

    def batch(self, what: str, calls: Callable[[Store], T]) -> T:
        """``calls(store)``: several calls in one trip to the store's thread, bounded as one.
        Each trip wakes that thread and then the caller again, and each waking thread waits
        for the GIL the training thread holds: a window's calls go together."""
        done: T = self._bounded(what, lambda: calls(self._store))
        return done

    def _bounded(self, what: str, call: Callable[[], Any]) -> Any:
        if self._client is None:  # connecting is bounded too, on its own
            self._client = self._wait("connecting", self._connect)
        return self._wait(what, call)

    def _wait(self, what: str, call: Callable[[], Any]) -> Any:
        """``call()`` on the store's thread, waited for at most the bound."""
        if self.dead is not None:
            raise TimeoutError(self.dead)
        if self._thread is None:
            self._thread = threading.Thread(target=self._serve, name="trainpace-store",
                                            daemon=True)
            self._thread.start()
        done = threading.Event()
        outcome: list[Any] = []
        self._calls.put((call, outcome, done))
        if not done.wait(self.timeout_s + GRACE_S):
            self.dead = (f"the job's store did not answer ({what}) within "
                         f"{self.timeout_s:g} s ({TIMEOUT_HINT})")
            raise TimeoutError(self.dead)
        ok, value = outcome[0]
        if not ok:
            raise value
        return value

    def _serve(self) -> None:
        """The store's thread: each call in turn, its outcome handed to the waiting caller."""
        while True:
            call, outcome, done = self._calls.get()
            try:
                outcome.append((True, call()))
            except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
                outcome.append((False, exc))
            finally:
                done.set()


class Exchange:
    """One rank's end of the exchange; the store is made on first use (the writer thread)."""

    def __init__(self, info: RankInfo, *, timeout_s: float = 10.0,
                 connect: Callable[[RankInfo, float], Store] = tcp_store) -> None:
        self.info = info
        self.timeout_s = timeout_s
        self._connect = connect
        self._store: BoundedStore | None = None
        self._seen: dict[int, int] = {}  # the newest window read from each rank
        self._seen_nodes: dict[int, int] = {}  # rank 0: the newest record of each node
        # The run's keys sit under its folder's name, so two Meters of one job (one run
        # folder each) do not read each other's windows.
        self.namespace = ""

    @property
    def store(self) -> BoundedStore:
        if self._store is None:
            self._store = BoundedStore(lambda: self._connect(self.info, self.timeout_s),
                                       self.timeout_s)
        return self._store

    # -- every rank ------------------------------------------------------------------------

    def post(self, record: WindowRecord) -> None:
        """Publish this rank's window record (one round trip)."""
        self.store.batch("posting a window", lambda store: self._post(store, record))

    def post_and_collect(self, record: WindowRecord,
                         ranks: Sequence[int]) -> list[WindowRecord]:
        """:meth:`post`, then :meth:`collect_ranks`: one trip to the store's thread."""
        def both(store: Store) -> list[Any]:
            self._post(store, record)
            return self._read(store, "", ranks, self._seen)

        arrived: list[WindowRecord] = self.store.batch("posting and reading windows", both)
        return arrived

    def _post(self, store: Store, record: WindowRecord) -> None:
        rank, window = record["rank"], record["window"]
        ns = self.namespace
        store.multi_set([f"{ns}w/{rank}/{window % RING}", f"{ns}last/{rank}"],
                        [orjson.dumps(record), str(window)])

    def agree(self, key: str, value: str | None) -> str:
        """Rank 0 sets ``key`` to ``value``; every other rank reads it (bounded wait)."""
        if self.info.rank == 0:
            assert value is not None
            self.store.set(f"agree/{key}", value)
            return value
        return self.store.get(f"agree/{key}").decode()

    # -- readers: rank 0 (flat), a node's leader, rank 0 (of the node records) ------------

    def collect(self) -> list[WindowRecord]:
        """The records posted since the last call, every rank (rank 0's job; never blocks
        on a rank that has not posted: its ``last`` key is checked before it is read)."""
        return self.collect_ranks(range(self.info.world_size))

    def collect_ranks(self, ranks: Sequence[int]) -> list[WindowRecord]:
        """The records of ``ranks`` posted since the last call (a node's leader: its node)."""
        arrived: list[WindowRecord] = self.store.batch(
            "reading windows", lambda store: self._read(store, "", ranks, self._seen))
        return arrived

    def post_node(self, record: Mapping[str, Any]) -> None:
        """A leader's node record (keyed like a rank's, under ``node/``)."""
        node, seq = record["rank"], record["window"]
        ns = self.namespace
        self.store.multi_set([f"{ns}node/w/{node}/{seq % RING}", f"{ns}node/last/{node}"],
                             [orjson.dumps(record), str(seq)])

    def collect_nodes(self, nodes: Sequence[int]) -> list[dict[str, Any]]:
        """The node records posted since the last call (rank 0, two round trips)."""
        return self.store.batch(
            "reading node records",
            lambda store: self._read(store, "node/", nodes, self._seen_nodes))

    def post_view(self, node: int, entries: Sequence[Mapping[str, Any]]) -> None:
        """A leader's rank entries of its node (read by rank 0 when it publishes)."""
        self.store.set(f"{self.namespace}view/{node}", orjson.dumps(list(entries)))

    def views(self, nodes: Sequence[int]) -> dict[int, list[dict[str, Any]]]:
        """The newest view of each node that has posted one (one or two round trips)."""
        keys = [f"{self.namespace}view/{n}" for n in nodes]
        store = self.store
        present = (list(nodes) if store.check(keys)
                   else [n for n, k in zip(nodes, keys, strict=True) if store.check([k])])
        if not present:
            return {}
        raw = store.multi_get([f"{self.namespace}view/{n}" for n in present])
        return {n: orjson.loads(v) for n, v in zip(present, raw, strict=True)}

    def _read(self, store: Store, kind: str, ids: Sequence[int],
              seen: dict[int, int]) -> list[Any]:
        """The records of ``ids`` newer than ``seen`` (two round trips: their ``last``
        keys, then the new records), on the store's thread."""
        ns = f"{self.namespace}{kind}"
        keys = {i: f"{ns}last/{i}" for i in ids}
        if all(i in seen for i in ids) or store.check(list(keys.values())):
            present = list(ids)
        else:  # some have not posted yet (or never will): ask for those one by one
            present = [i for i in ids if i in seen or store.check([keys[i]])]
        lasts = store.multi_get([keys[i] for i in present]) if present else []
        wanted: list[tuple[int, int]] = []
        for i, raw in zip(present, lasts, strict=True):
            newest = int(raw)
            first = max(seen.get(i, 0) + 1, newest - RING + 1)
            wanted.extend((i, w) for w in range(first, newest + 1))
            seen[i] = newest
        if not wanted:
            return []
        values = store.multi_get([f"{ns}w/{i}/{w % RING}" for i, w in wanted])
        out: list[dict[str, Any]] = []
        for (_i, window), raw in zip(wanted, values, strict=True):
            record: dict[str, Any] = orjson.loads(raw)
            if record.get("window") == window:  # not overwritten by a newer lap of the ring
                out.append(record)
        return out
