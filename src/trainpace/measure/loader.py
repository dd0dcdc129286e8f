"""The DataLoader behind a loader, and the settings that decide how fast it feeds."""

from __future__ import annotations

from typing import Any

from torch.utils.data import DataLoader

# Attributes under which wrappers (Accelerate, Lightning, user classes) keep the real loader.
_WRAPPED_AS = ("loader", "dataloader", "data_loader", "base_dataloader", "_loader", "_dataloader",
               "iterable", "_iterable")


def find_dataloader(obj: Any, depth: int = 3) -> DataLoader[Any] | None:
    """The ``torch.utils.data.DataLoader`` in ``obj`` or a few wrappers down, if any."""
    if isinstance(obj, DataLoader):
        return obj
    if depth == 0:
        return None
    for name in _WRAPPED_AS:
        inner = getattr(obj, name, None)
        if inner is not None and inner is not obj:
            found = find_dataloader(inner, depth - 1)
            if found is not None:
                return found
    return None


def loader_settings(obj: Any) -> dict[str, Any] | None:
    """The settings of the DataLoader under ``obj`` (None when there is none)."""
    loader = find_dataloader(obj)
    if loader is None:
        return None
    workers = int(loader.num_workers)
    return {
        "class": f"{type(obj).__module__}.{type(obj).__qualname__}",
        "num_workers": workers,
        # DataLoader keeps prefetch_factor=None when num_workers == 0 (no prefetching then)
        "prefetch_factor": loader.prefetch_factor if workers > 0 else None,
        "pin_memory": bool(loader.pin_memory),
        "persistent_workers": bool(loader.persistent_workers),
        "batch_size": loader.batch_size,
        "drop_last": bool(loader.drop_last),
        "length": _length(loader),
    }


def _length(loader: DataLoader[Any]) -> int | None:
    try:
        return len(loader)
    except TypeError:  # an IterableDataset without __len__
        return None
