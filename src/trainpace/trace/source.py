"""The decompressed bytes of a trace file, read once, in one pass.

A trace is opened once and never sought back (it may be a FIFO). A gzip trace is inflated a
block at a time as the parse asks for more, in the parsing thread, so memory stays a block
whatever the file's size. A thread of its own for zlib was measured no faster (ResNet traces
of 35 and 90 MB, fresh processes in turns on a shared 2-core machine: 0.098 s against 0.102 s
and 0.264 s against 0.284 s, medians): the parse holds the GIL most of the time, and each
hand-off between the two threads waits for the other, and on a busy machine for the scheduler.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from typing import IO

from trainpace.errors import TraceFormatError
from trainpace.inputs import open_regular

_GZIP_MAGIC = b"\x1f\x8b"
_IN_BYTES = 1 << 16  # compressed bytes per read
_OUT_BYTES = 1 << 16  # decompressed bytes per block handed to the parser
_GZIP = 16 + zlib.MAX_WBITS  # zlib's window bits for a gzip header and trailer


class _DamagedError(Exception):
    """The gzip stream ends too early or does not inflate."""


def _inflated(head: bytes, raw: IO[bytes], out_bytes: int) -> Iterator[bytes]:
    """The decompressed blocks of a gzip file, all its members; raises _DamagedError if the
    stream ends inside a member."""
    inflater = zlib.decompressobj(_GZIP)
    pending = head
    while True:
        data = pending or raw.read(_IN_BYTES)
        pending = b""
        if not data:
            break
        if inflater.eof:  # another member may follow; gzip allows zero padding
            data = data.lstrip(b"\x00")
            if not data:
                continue
            inflater = zlib.decompressobj(_GZIP)
        while data:
            out = inflater.decompress(data, out_bytes)
            if out:
                yield out
            if inflater.eof:
                pending = inflater.unused_data
                break
            data = inflater.unconsumed_tail
    if not inflater.eof:
        raise _DamagedError("the stream ends before its last member does")


class Source:
    """The decompressed bytes of a trace file; every read error is a TraceFormatError.

    ``read`` returns the next block (its size is the source's, not the one asked for), and
    b"" at the end.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._raw: IO[bytes] | None = None
        self._head = b""
        self._gunzip: Iterator[bytes] | None = None
        self._done = False

    def __enter__(self) -> Source:
        # a regular file or a FIFO (read once, as it comes); a device is refused by name
        self._raw = open_regular(self.path, TraceFormatError, allow_streams=True)
        try:
            self._head = self._raw.read(2)  # a buffered read: 2 bytes unless the file is shorter
        except OSError as exc:
            raise TraceFormatError(f"{self.path}: cannot read it ({exc.strerror or exc})") from exc
        if self._head == _GZIP_MAGIC:
            head, self._head = self._head, b""
            self._gunzip = _inflated(head, self._raw, _OUT_BYTES)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._raw is not None:
            self._raw.close()

    def read(self, size: int) -> bytes:
        """The next block of decompressed bytes (plain files: up to ``size`` bytes)."""
        assert self._raw is not None
        if self._done:
            return b""
        try:
            if self._gunzip is not None:
                block = next(self._gunzip, b"")
            else:
                head, self._head = self._head, b""
                block = head + self._raw.read(max(size - len(head), 0)) if size > len(head) \
                    else head
        except (_DamagedError, zlib.error, EOFError) as exc:
            self._done = True
            raise TraceFormatError(
                f"{self.path}: the gzip stream is damaged or truncated ({exc}); "
                "the profiler may have been killed while writing it"
            ) from exc
        except OSError as exc:
            self._done = True
            raise TraceFormatError(f"{self.path}: cannot read it ({exc})") from exc
        self._done = not block
        return block
