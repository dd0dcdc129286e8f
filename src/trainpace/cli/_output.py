"""Helpers the verbs share to write their results."""

from __future__ import annotations

import contextlib
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


def error_object(verb: str, message: str, exit_code: int) -> dict[str, Any]:
    """The one ``--json`` object of a verb that ended in an error: which verb, what went wrong
    (the line stderr shows), and the exit status (2 bad usage, 1 trainpace's own error; under
    ``run``, the script's own status where the script decided it)."""
    return {"error": {"verb": verb, "message": message, "exit_code": exit_code,
                      "usage": exit_code == 2}}


def print_error_json(verb: str, message: str, exit_code: int,
                     stream: TextIO | None = None) -> None:
    """Print :func:`error_object` as the command's one JSON object (when stdout's reader is
    gone, the error may be that very pipe: stderr has said it, and nothing more is)."""
    with contextlib.suppress(BrokenPipeError):
        print_json(error_object(verb, message, exit_code), stream)
