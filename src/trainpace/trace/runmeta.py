"""The run a trace came from: the ``meta.json`` of a run folder holding it.

``Meter(out=..., profile_steps=...)`` writes its trace to ``<run>/profile/``, beside the run's
``meta.json`` (DataLoader settings, CPU count, device). Reading it makes the trace's advice
about the run that was recorded, not generic ("wrap it with meter.loader(...)" for a loader the
Meter already wrapped).
"""

from __future__ import annotations

import json
import os
from typing import Any

from trainpace.errors import TraceFormatError
from trainpace.inputs import JSON_MAX_BYTES, read_bounded

META_NAME = "meta.json"
META_SCHEMA_PREFIX = "trainpace.meta/"
_LEVELS = 2  # the trace's own folder, and the run folder above profile/


def find_run_meta(trace: str | os.PathLike[str]) -> tuple[str | None, dict[str, Any], str | None]:
    """``(path, meta, problem)``: the run's ``meta.json`` beside the trace or one folder up, its
    content, and why it could not be used (None when it was, or when there is none)."""
    # os.path, not pathlib: pathlib costs trainpace analyze 9 ms to import (urllib, ipaddress)
    folder = os.path.dirname(os.path.realpath(trace))
    folders = [folder]
    while len(folders) < _LEVELS and os.path.dirname(folders[-1]) != folders[-1]:
        folders.append(os.path.dirname(folders[-1]))
    for candidate in folders:
        path = os.path.join(candidate, META_NAME)
        if not os.path.isfile(path):
            continue
        try:
            meta = json.loads(read_bounded(path, JSON_MAX_BYTES, TraceFormatError))
        except (TraceFormatError, ValueError, RecursionError) as exc:
            why = exc if not isinstance(exc, RecursionError) else "nested too deeply"
            return path, {}, f"{path}: not read ({why}); the advice is generic"
        if not isinstance(meta, dict) or not str(meta.get("schema", "")).startswith(
                META_SCHEMA_PREFIX):
            continue  # some other tool's meta.json
        return path, meta, None
    return None, {}, None
