"""How figures read in a sentence or a console line: one place for every layer."""

from __future__ import annotations


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
