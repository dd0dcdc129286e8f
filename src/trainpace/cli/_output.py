"""Helpers the verbs share to write their results."""

from __future__ import annotations

import json
import sys
from typing import Any, TextIO

from trainpace.runlog import json_safe


def print_json(obj: Any, stream: TextIO | None = None) -> None:
    """Print exactly one strict-JSON object (non-finite floats become null)."""
    out = stream if stream is not None else sys.stdout
    out.write(json.dumps(json_safe(obj), indent=2, sort_keys=False) + "\n")
