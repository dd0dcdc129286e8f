"""Will a trace's analysis fit in memory? Sizes read from the file's metadata, never its body.

A gzip trace's JSON size comes from its trailer; a FIFO or other stream has no size before it is
read (and can be read only once), so it is not checked.
"""

from __future__ import annotations

import math
import os
import stat

from trainpace.errors import TraceFormatError
from trainpace.units import format_bytes

# JSON per piece: 128 KB keeps a piece's objects (~1 MB) small beside a small trace's columns,
# and large enough that the per-piece work (a few dozen numpy calls) costs nothing.
CHUNK_BYTES = 1 << 17
# Bytes the analysis needs per byte of trace JSON (columns and their derived arrays), and the
# parsed Python objects of one piece per byte of it; measured on real traces, kept generous.
_COLUMN_BYTES_PER_JSON_BYTE = 0.5
_OBJECT_BYTES_PER_JSON_BYTE = 8.0



def json_bytes(path: str) -> int | None:
    """The size of the trace's JSON: the file size, or for gzip the smallest size consistent
    with its trailer (which stores the size modulo 4 GiB); None when the input is not a regular
    file (a FIFO, a device): its size is not known before it is read, and it can be read once.
    """
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):
            return None
        size = info.st_size
        with open(path, "rb") as fh:
            if fh.read(2) != b"\x1f\x8b" or size < 18:
                return size
            fh.seek(-4, os.SEEK_END)
            stored = int.from_bytes(fh.read(4), "little")
    except OSError as exc:
        raise TraceFormatError(f"{path}: cannot read it ({exc.strerror or exc})") from exc
    wraps = max(0, math.ceil((size - stored) / 2**32))
    return stored + wraps * 2**32


def memory_needed(path: str, chunk_bytes: int = CHUNK_BYTES, *,
                  size: int | None = None) -> int:
    """Bytes of memory the analysis of one trace needs, estimated from its JSON size (``size``
    when known, else read; for an input of unknown size, what one piece needs)."""
    json_size = size if size is not None else json_bytes(path)
    return int((json_size or 0) * _COLUMN_BYTES_PER_JSON_BYTE
               + 2 * chunk_bytes * _OBJECT_BYTES_PER_JSON_BYTE) + (32 << 20)


def available_memory() -> int | None:
    """Free memory in bytes, or None if it cannot be read.

    Linux's own figure is read directly: importing psutil for it would cost more than
    analyzing a small trace.
    """
    try:
        with open("/proc/meminfo", "rb") as fh:
            for line in fh:
                if line.startswith(b"MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except Exception:  # noqa: BLE001 - any failure means "unknown", never a crash
        return None


def check_memory(path: str, memory_available: int | None = None, *,
                 size: int | None = None) -> None:
    """Refuse a trace whose analysis would not fit in memory, before reading it (``size``:
    its :func:`json_bytes`, when already known)."""
    json_size = size if size is not None else json_bytes(path)
    if json_size is None:  # a stream: nothing to check before reading it
        return
    free = available_memory() if memory_available is None else memory_available
    need = memory_needed(path, size=json_size)
    if free is not None and need > free:
        raise TraceFormatError(
            f"{path}: too large for the memory available: its {format_bytes(json_size)} of "
            f"JSON need about {format_bytes(need)} to analyze and {format_bytes(free)} is free; "
            "analyze it on a machine with more memory or record fewer steps "
            "(torch.profiler.schedule(active=...))"
        )
