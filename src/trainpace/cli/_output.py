"""Helpers the verbs share to write their results."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Mapping
from typing import Any, TextIO

import orjson

# orjson writes non-finite floats as null (strict JSON), and in C: the stdlib encoder with an
# indent runs in Python, tens of ms for an analysis of a few ranks.
_ORJSON = orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY


def json_safe(value: Any) -> Any:
    """Replace non-finite floats with None, recursively, so the output is strict JSON.

    The same as ``trainpace.runlog.json_safe``, here so that printing does not import the
    run-folder reader (and its step series) on the way.
    """
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def print_json(obj: Any, stream: TextIO | None = None) -> None:
    """Print exactly one strict-JSON object (non-finite floats become null)."""
    out = stream if stream is not None else sys.stdout
    encoding = (getattr(out, "encoding", None) or "").lower().replace("-", "")
    if encoding == "utf8":  # orjson writes UTF-8, not \\u escapes: only where that prints
        try:
            out.write(orjson.dumps(obj, option=_ORJSON).decode() + "\n")
            return
        except TypeError:  # a value orjson does not know (an int beyond 64 bits, ...)
            pass
    out.write(json.dumps(json_safe(obj), indent=2, sort_keys=False) + "\n")
