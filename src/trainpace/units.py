"""How figures read in a sentence or a console line: one place for every layer."""

from __future__ import annotations

import math

# How every output says "unknown": a figure that was not measured, a setting not given.
UNKNOWN = "—"


def format_duration(seconds: float) -> str:
    """``850 µs``, ``12.3 ms``, ``1.2 s``, ``5m00s``, ``2h05m``: three significant digits up
    to two minutes, then minutes and seconds, then hours and minutes."""
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} µs"
    if seconds < 1.0:
        return f"{seconds * 1e3:.3g} ms"
    if seconds < 120.0:
        return f"{seconds:.3g} s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 120:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def format_seconds(value: float | None) -> str:
    """:func:`format_duration`, or :data:`UNKNOWN` (also for NaN)."""
    return UNKNOWN if value is None or math.isnan(value) else format_duration(value)


def format_number(value: float | None, unit: str = "", digits: int = 3) -> str:
    """A figure with its unit and thousands separators (``12,345 samples/s``, ``0.25``);
    :data:`UNKNOWN` when unknown."""
    if value is None:
        return UNKNOWN
    text = f"{value:,.0f}" if abs(value) >= 10**digits else f"{value:.{digits}g}"
    return f"{text} {unit}" if unit else text


def format_compact(value: float) -> str:
    """A count or rate in few characters: ``0.25``, ``12``, ``3.4k``, ``45.6k``, ``1.2M``."""
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= limit:
            return f"{value / limit:.3g}{suffix}"
    return f"{value:.3g}"


def format_bytes(n: float) -> str:
    """``512 B``, ``67.1 MB``, ``2.15 GB``: three significant digits, decimal units."""
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n:.0f} B"


def number_or_none(value: object) -> float | None:
    """``value`` as a finite float, or None when it is not a finite number (a bool is not, nor
    an integer too large for a float)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None
