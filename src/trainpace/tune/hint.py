"""What the diagnosis says about the tuner when it cannot run it itself."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any


def command_hint(meta: Mapping[str, Any] | None, run_folder: str | None = None) -> str:
    """The ``trainpace tune-loader`` command for a run, from its ``meta.json``.

    The dataset cannot be re-created from a run folder, so the command names the one thing
    the user must supply (a function that returns their dataset or DataLoader) and takes the
    step time from the run itself (``--run``), or states it when the folder is unknown.
    """
    loader = (meta or {}).get("loader") or {}
    cls = loader.get("class") if isinstance(loader, Mapping) else None
    what = "your DataLoader" if cls else "your dataset or DataLoader"
    step = f"--run {shlex.quote(str(run_folder))}" if run_folder else "--step-ms STEP_MS"
    return (f"trainpace tune-loader MODULE:FACTORY {step}  (FACTORY: a function in MODULE "
            f"that returns {what}; it finds the fewest workers that hide the wait)")
