"""The decompressed bytes of a trace file, read once, gunzipped beside the parse.

A trace is opened once and never sought back (it may be a FIFO). A large gzip trace is
decompressed in a thread of its own: zlib releases the GIL while it inflates, so on two cores
the next block is decompressed while the parser works on this one, and the parse costs the
time of the slower of the two rather than of both. The blocks go through a small bounded
queue, so memory stays a few MB whatever the file's size. A small one is decompressed inline.

Behind a busy parser the thread may wait up to a GIL switch interval (5 ms by default) each
time zlib gives the GIL back; the interval is the caller's (its training's threads feel it), so
it is left as it is.
"""

from __future__ import annotations

import os
import queue
import stat
import threading
import zlib
from collections.abc import Iterator
from typing import IO

from trainpace.errors import TraceFormatError
from trainpace.inputs import open_regular

_GZIP_MAGIC = b"\x1f\x8b"
# Compressed bytes per read: ~1-2 MB of trace JSON, so that one zlib call (the GIL released)
# does a block's whole work; smaller reads cost more Python-level steps per MB.
_IN_BYTES = 1 << 16
# Decompressed bytes per block handed to the parser: from the thread, blocks of several pieces
# (each hand-off costs a wake-up and a wait for the GIL: ~15% less CPU than 256 KB blocks on
# a 35 MB trace); inline, smaller ones (less memory, nothing to wake).
_OUT_BYTES = 1 << 20
_INLINE_OUT_BYTES = 1 << 16
_QUEUE_BLOCKS = 2  # double buffering: 1 MB blocks, the next one inflating while this one parses
# Below this compressed size the decompression takes a few ms: done inline, as the parse asks
# for it; above it in a thread (on a loaded machine each hand-off between threads can wait for
# the scheduler, which only pays when there is much to decompress).
_THREAD_MIN_BYTES = 1 << 19
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


class _Gunzip(threading.Thread):
    """Decompresses a gzip file into a queue of blocks; ends the queue with None, or with the
    exception that stopped it."""

    def __init__(self, blocks: Iterator[bytes]) -> None:
        super().__init__(name="trainpace-gunzip", daemon=True)
        self.source = blocks
        self.blocks: queue.Queue[bytes | BaseException | None] = queue.Queue(_QUEUE_BLOCKS)
        self.stop = threading.Event()

    def _put(self, item: bytes | BaseException | None) -> bool:
        while not self.stop.is_set():
            try:
                self.blocks.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def run(self) -> None:
        try:
            for block in self.source:
                if not self._put(block):
                    return
        except BaseException as exc:  # noqa: BLE001 - handed to the reading thread
            self._put(exc)
        else:
            self._put(None)

    def next(self) -> bytes | BaseException | None:
        return self.blocks.get()


class Source:
    """The decompressed bytes of a trace file; every read error is a TraceFormatError.

    ``read`` returns the next block (its size is the source's, not the one asked for), and
    b"" at the end.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._raw: IO[bytes] | None = None
        self._head = b""
        self._gunzip: _Gunzip | None = None
        self._inline: Iterator[bytes] | None = None
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
            if _size(self._raw) < _THREAD_MIN_BYTES:
                # a few ms of zlib: not worth a thread's hand-offs
                self._inline = _inflated(head, self._raw, _INLINE_OUT_BYTES)
            else:
                self._gunzip = _Gunzip(_inflated(head, self._raw, _OUT_BYTES))
                self._gunzip.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._gunzip is not None:
            self._gunzip.stop.set()
            self._gunzip.join(timeout=1.0)
            if self._gunzip.is_alive():
                # Blocked reading a stream whose writer went quiet (a FIFO): closing the file
                # under it would wait on its lock. The daemon thread ends with the writer.
                return
        if self._raw is not None:
            self._raw.close()

    def read(self, size: int) -> bytes:
        """The next block of decompressed bytes (plain files: up to ``size`` bytes)."""
        assert self._raw is not None
        if self._done:
            return b""
        if self._gunzip is None and self._inline is None:
            head, self._head = self._head, b""
            try:
                block = head + self._raw.read(max(size - len(head), 0)) if size > len(head) \
                    else head
            except OSError as exc:
                raise TraceFormatError(f"{self.path}: cannot read it ({exc})") from exc
            self._done = not block
            return block
        item = self._next()
        if item is None:
            self._done = True
            return b""
        if isinstance(item, bytes):
            return item
        self._done = True
        if isinstance(item, (_DamagedError, zlib.error, EOFError)):
            raise TraceFormatError(
                f"{self.path}: the gzip stream is damaged or truncated ({item}); "
                "the profiler may have been killed while writing it"
            ) from item
        if isinstance(item, OSError):
            raise TraceFormatError(f"{self.path}: cannot read it ({item})") from item
        raise item

    def _next(self) -> bytes | BaseException | None:
        if self._gunzip is not None:
            return self._gunzip.next()
        assert self._inline is not None
        try:
            return next(self._inline, None)
        except (_DamagedError, zlib.error, EOFError, OSError) as exc:
            return exc


def _size(raw: IO[bytes]) -> int:
    """The file's size; a stream's (a FIFO) counts as large: how much will come is unknown."""
    try:
        info = os.fstat(raw.fileno())
    except (OSError, ValueError):
        return _THREAD_MIN_BYTES
    return info.st_size if stat.S_ISREG(info.st_mode) else _THREAD_MIN_BYTES
