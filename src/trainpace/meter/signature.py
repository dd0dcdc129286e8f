"""The Meter's signature and settings list, made from :class:`~trainpace.config.MeterConfig`'s
fields: what ``help()``, notebooks and IDEs that read signatures at run time show."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

from trainpace.config import MeterConfig


def with_the_settings(meter: type[Any]) -> None:
    """``meter.__init__``'s signature gets MeterConfig's fields (but ``out``) as keywords
    between ``out`` and its own keywords, and its docstring the list of their defaults."""
    init = meter.__init__
    own = inspect.signature(init).parameters
    settings = [inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default,
                                  annotation=f.type)
                for f in dataclasses.fields(MeterConfig) if f.name != "out"]
    init.__signature__ = inspect.Signature(
        [own["self"], own["out"], *settings, own["sinks"], own["stream"], own["clock"],
         own["made_by"]])
    listed = "\n".join(f"        {f.name}={f.default!r}" for f in dataclasses.fields(MeterConfig)
                       if f.name != "out")
    meter.__doc__ = f"{meter.__doc__}\n    The settings and their defaults:\n\n{listed}\n"
