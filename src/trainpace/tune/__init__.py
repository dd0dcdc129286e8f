"""DataLoader tuning: the cheapest settings that make the data wait disappear, or proof that
none can (``trainpace.tune_loader``, ``trainpace tune-loader``)."""

from trainpace.tune.hint import advice_lines, command_hint
from trainpace.tune.result import TARGET_WAIT_PCT, Probe, Setting, Trial, TuneResult
from trainpace.tune.search import tune_loader
from trainpace.tune.source import DatasetError, load_factory

__all__ = [
    "TARGET_WAIT_PCT",
    "DatasetError",
    "Probe",
    "Setting",
    "Trial",
    "TuneResult",
    "advice_lines",
    "command_hint",
    "load_factory",
    "tune_loader",
]
