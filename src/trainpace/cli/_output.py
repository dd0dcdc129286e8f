"""Helpers the verbs share to write their results."""

from __future__ import annotations

import json
import sys
from typing import Any, TextIO

import orjson

from trainpace.jsonsafe import json_safe

# orjson writes non-finite floats as null (strict JSON), and in C: the stdlib encoder with an
# indent runs in Python, tens of ms for an analysis of a few ranks.
_ORJSON = orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY


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
