"""Text from a run folder or a trace, made safe to show on a terminal.

Run ids, host and device names, op and kernel names, paths and notes come from files anyone
may have written. Shown raw, a control character acts on the terminal (ESC sequences retitle
the window or clear the screen, BEL rings, U+202E reverses the text that follows), and in a
rich markup context ``[link=...]`` becomes a live link, ``exp[lr=0.001]`` loses its bracket and
``[/]`` raises. So every such string goes through :func:`safe_text` (each control character
shown as its escape, visibly) and the report's consoles parse no markup (``markup=False``):
what the file says is what the terminal shows.
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import TypeVar

import msgspec

# C0 and C1 controls, DEL, and the bidirectional controls (embeddings, overrides, isolates
# and marks): none of them is text a name needs
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")

_T = TypeVar("_T")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def safe_text(text: object) -> str:
    """``text`` as a string with each control character written as its escape (``\\x1b``,
    ``\\u202e``): shown, never acted on."""
    return _CONTROL.sub(_escape, str(text))


def cleaned(value: _T) -> _T:
    """``value`` with :func:`safe_text` applied to every string in it, and every float that
    is not finite made None (NaN is unknown, never "nan samples/s"): dataclasses, msgspec
    structs, lists, tuples and dicts walked, other values as they are. What a report renders,
    made safe once at its entry."""
    if isinstance(value, str):
        return safe_text(value)  # type: ignore[return-value]
    if isinstance(value, float):
        return value if math.isfinite(value) else None  # type: ignore[return-value]
    if isinstance(value, msgspec.Struct):
        return msgspec.structs.replace(value, **{
            name: cleaned(getattr(value, name)) for name in value.__struct_fields__})
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.replace(value, **{
            f.name: cleaned(getattr(value, f.name)) for f in dataclasses.fields(value) if f.init})
    if isinstance(value, list):
        return [cleaned(v) for v in value]  # type: ignore[return-value]
    if isinstance(value, tuple):
        return tuple(cleaned(v) for v in value)  # type: ignore[return-value]
    if isinstance(value, dict):
        return {cleaned(k): cleaned(v) for k, v in value.items()}  # type: ignore[return-value]
    return value


