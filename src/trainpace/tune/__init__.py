"""DataLoader tuning: the cheapest settings that make the data wait disappear, or proof that
none can (``trainpace.tune_loader``, ``trainpace tune-loader``).

The names are imported on first use: ``import trainpace.tune`` loads no PyTorch.
"""

from __future__ import annotations

import importlib
import typing as _typing

if _typing.TYPE_CHECKING:
    from trainpace.errors import DatasetError
    from trainpace.tune.hint import advice_lines, tune_advice
    from trainpace.tune.loader_source import load_factory
    from trainpace.tune.search import tune_loader
    from trainpace.tune.tuning import TARGET_WAIT_PCT, Probe, Setting, Trial, TuneResult

_WHERE = {
    "TARGET_WAIT_PCT": "trainpace.tune.tuning",
    "DatasetError": "trainpace.errors",
    "Probe": "trainpace.tune.tuning",
    "Setting": "trainpace.tune.tuning",
    "Trial": "trainpace.tune.tuning",
    "TuneResult": "trainpace.tune.tuning",
    "advice_lines": "trainpace.tune.hint",
    "load_factory": "trainpace.tune.loader_source",
    "tune_advice": "trainpace.tune.hint",
    "tune_loader": "trainpace.tune.search",
}

__all__ = [
    "TARGET_WAIT_PCT",
    "DatasetError",
    "Probe",
    "Setting",
    "Trial",
    "TuneResult",
    "advice_lines",
    "load_factory",
    "tune_advice",
    "tune_loader",
]


def __getattr__(name: str) -> _typing.Any:
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'trainpace.tune' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))
