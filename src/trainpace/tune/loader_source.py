"""What is tuned: a dataset, or a DataLoader whose other settings are kept; and the factory
that makes it (``MODULE:FACTORY`` on the command line)."""

from __future__ import annotations

import importlib
import importlib.util
import multiprocessing
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
from torch.utils.data import DataLoader, IterableDataset, get_worker_info
from torch.utils.data._utils.collate import default_collate

from trainpace.errors import ConfigError
from trainpace.errors import DatasetError as DatasetError  # probe and trial import it from here

_MARK = re.compile(r"\[trainpace item (?P<index>[^\]]*)\] (?P<what>[^\n]*)")


class _ItemFailedError(Exception):
    """Carries the failing index out of a worker: torch re-raises it as ``type(exc)(text)``."""


class _Named:
    """A map-style dataset that says which item failed; everything else is the dataset's.

    ``inflight`` (shared memory, two slots per worker: its pid and the index it is loading)
    names the item a worker was on when it was killed, which no exception can carry.
    """

    def __init__(self, dataset: Any, inflight: Any = None) -> None:
        self.dataset = dataset
        self.inflight = inflight

    def __len__(self) -> int:
        return len(self.dataset)

    def _loading(self, index: Any) -> None:
        info = get_worker_info()
        if self.inflight is not None and info is not None and isinstance(index, int):
            self.inflight[2 * info.id] = os.getpid()
            self.inflight[2 * info.id + 1] = index

    def __getitem__(self, index: Any) -> Any:
        self._loading(index)
        try:
            return self.dataset[index]
        except Exception as exc:
            what = f"{type(exc).__name__}: {exc}"
            raise _ItemFailedError(f"[trainpace item {index!r}] {what}") from exc

    def __getattr__(self, name: str) -> Any:
        if name == "dataset":  # during unpickling in a spawned worker, before __init__
            raise AttributeError(name)
        return getattr(self.dataset, name)


class _NamedBatched(_Named):
    """The same for a dataset that fetches a batch at once (``__getitems__``)."""

    def __getitems__(self, indices: list[Any]) -> Any:
        if indices:
            self._loading(indices[0])
        try:
            return self.dataset.__getitems__(indices)
        except Exception as exc:
            first = indices[0] if indices else None
            raise _ItemFailedError(
                f"[trainpace item {first!r}..] {type(exc).__name__}: {exc}") from exc


def dead_workers(loader: Any) -> dict[int, int]:
    """{pid: index it was loading} of the loader's workers that are no longer alive."""
    inflight = getattr(getattr(loader, "dataset", None), "inflight", None)
    if inflight is None:
        return {}
    dead: dict[int, int] = {}
    for slot in range(0, len(inflight), 2):
        pid, index = int(inflight[slot]), int(inflight[slot + 1])
        if pid <= 0:
            continue
        try:
            alive = psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            alive = False
        if not alive:
            dead[pid] = index
    return dead


def killed_item(loader: Any, exc: BaseException) -> int | None:
    """The index a dead worker was loading: the one torch's message names, else any."""
    dead = dead_workers(loader)
    named = {int(p) for p in re.findall(r"\d+", str(exc).split("exited")[0].split("signal")[0])}
    for pid in [*(p for p in dead if p in named), *dead]:
        if dead[pid] >= 0:
            return dead[pid]
    return None


def failed_item(exc: BaseException) -> tuple[str, str] | None:
    """(index, "Type: message") of the item whose loading raised ``exc``, if it says."""
    # The worker's traceback also shows the source line that raised: the message is last.
    found = list(_MARK.finditer(str(exc)))
    return (found[-1]["index"], found[-1]["what"]) if found else None


@dataclass(frozen=True, kw_only=True)
class LoaderSource:
    """A dataset and the DataLoader settings the tuner keeps fixed."""

    name: str                        # how errors name it: the factory, or the dataset's class
    dataset: Any
    batch_size: int | None
    collate_fn: Callable[[list[Any]], Any]
    kept: dict[str, Any] = field(default_factory=dict)  # sampler, drop_last, timeout, ...
    original: dict[str, Any] | None = None  # the DataLoader's own tuned settings, if one was given

    @property
    def iterable(self) -> bool:
        return isinstance(self.dataset, IterableDataset)

    def loader(self, settings: dict[str, Any], *, timeout_s: float) -> DataLoader[Any]:
        """A DataLoader with ``settings`` (num_workers, ...) over a dataset that names failures."""
        dataset = self.dataset
        if not self.iterable:
            named = _NamedBatched if hasattr(dataset, "__getitems__") else _Named
            workers = int(settings.get("num_workers", 0))
            context = self.kept.get("multiprocessing_context")
            inflight = None
            if workers:
                maker = context if context is not None and not isinstance(context, str) else \
                    multiprocessing.get_context(context)
                inflight = maker.RawArray("q", [-1] * (2 * workers))
            dataset = named(dataset, inflight)
        kwargs = dict(self.kept)
        if "batch_sampler" not in kwargs:
            kwargs["batch_size"] = self.batch_size
        if settings.get("num_workers", 0) > 0 and not kwargs.get("timeout"):
            kwargs["timeout"] = timeout_s  # a hung worker must not hang the tuner
        return DataLoader(dataset, collate_fn=self.collate_fn, **kwargs, **settings)


def describe(dataset: Any) -> str:
    kind = type(dataset)
    return f"{kind.__module__}.{kind.__qualname__}"


def as_source(
    dataset_or_loader: Any,
    *,
    batch_size: int | None,
    collate_fn: Callable[[list[Any]], Any] | None,
    name: str | None = None,
) -> LoaderSource:
    """Take a DataLoader apart (keeping its sampler, collate_fn, drop_last, batch size), or
    wrap a dataset; ``batch_size`` and ``collate_fn`` given here win over the loader's."""
    if isinstance(dataset_or_loader, DataLoader):
        loader = dataset_or_loader
        kept: dict[str, Any] = {
            "timeout": loader.timeout,
            "worker_init_fn": loader.worker_init_fn,
            "multiprocessing_context": loader.multiprocessing_context,
            "generator": loader.generator,
        }
        if hasattr(loader, "in_order"):  # torch ≥ 2.6: out-of-order delivery changes the wait
            kept["in_order"] = loader.in_order
        size = batch_size if batch_size is not None else loader.batch_size
        iterable = isinstance(loader.dataset, IterableDataset)
        if loader.batch_size is None and batch_size is None and loader.batch_sampler is not None:
            kept["batch_sampler"] = loader.batch_sampler  # the user's own: keep it whole
        elif not iterable:
            kept["sampler"] = loader.sampler
            kept["drop_last"] = loader.drop_last
        else:
            kept["drop_last"] = loader.drop_last
        workers = int(loader.num_workers)
        original = {
            "num_workers": workers,
            "prefetch_factor": loader.prefetch_factor if workers > 0 else None,
            "pin_memory": bool(loader.pin_memory),
            "persistent_workers": bool(loader.persistent_workers),
        }
        return LoaderSource(
            name=name or f"DataLoader over {describe(loader.dataset)}",
            dataset=loader.dataset, batch_size=size,
            collate_fn=collate_fn or loader.collate_fn, kept=kept, original=original)
    dataset = dataset_or_loader
    if not isinstance(dataset, IterableDataset) and not (
        hasattr(dataset, "__getitem__") and hasattr(dataset, "__len__")
    ):
        raise ConfigError(
            "dataset_or_loader",
            f"<{describe(dataset)}>",
            "must be a torch Dataset (with __getitem__ and __len__), an IterableDataset "
            "or a DataLoader",
        )
    if batch_size is not None and batch_size < 1:
        raise ConfigError("batch_size", batch_size, "must be ≥ 1 (or None to load samples alone)")
    return LoaderSource(
        name=name or describe(dataset), dataset=dataset,
        batch_size=1 if batch_size is None else batch_size,
        collate_fn=collate_fn or default_collate)


def load_factory(spec: str) -> tuple[Any, str]:
    """Call ``MODULE:FACTORY`` (or ``path/to/file.py:FACTORY``); returns (result, spec).

    The current folder is importable, as with ``python -m``. Every failure is a
    :class:`DatasetError` naming the factory.
    """
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError("FACTORY", spec, "must be MODULE:FACTORY (e.g. mypkg.data:make_dataset)")
    if "" not in sys.path and str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    try:
        if module_name.endswith(".py"):
            path = Path(module_name)
            if not path.is_file():
                raise DatasetError(f"{spec}: no such file {path}")
            unit = importlib.util.spec_from_file_location(path.stem, path)
            assert unit is not None
            assert unit.loader is not None
            module = importlib.util.module_from_spec(unit)
            sys.modules[path.stem] = module  # workers started by spawn re-import it by name
            unit.loader.exec_module(module)
        else:
            module = importlib.import_module(module_name)
    except DatasetError:
        raise
    except ModuleNotFoundError as exc:
        raise DatasetError(
            f"{spec}: cannot import {exc.name!r} (run from the folder that holds the module, "
            "or install it)") from exc
    except Exception as exc:
        raise DatasetError(f"{spec}: importing {module_name} raised "
                           f"{type(exc).__name__}: {exc}") from exc
    target: Any = module
    for part in attr.split("."):
        if not hasattr(target, part):
            raise DatasetError(f"{spec}: {module_name} has no attribute {attr!r}; "
                               "name a function that returns a Dataset or a DataLoader")
        target = getattr(target, part)
    if not callable(target):
        raise DatasetError(f"{spec}: {attr} is a {type(target).__name__}, not a function; "
                           "name a function that returns a Dataset or a DataLoader")
    try:
        made = target()
    except Exception as exc:
        raise DatasetError(f"{spec}: calling {attr}() raised {type(exc).__name__}: {exc}") from exc
    if not (isinstance(made, (DataLoader, IterableDataset))
            or (hasattr(made, "__getitem__") and hasattr(made, "__len__"))):
        raise DatasetError(f"{spec}: {attr}() returned {describe(made)}, not a Dataset or a "
                           "DataLoader; return the dataset (or the DataLoader) you train on")
    return made, spec
