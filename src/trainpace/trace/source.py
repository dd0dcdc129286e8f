"""The decompressed bytes of a trace file, read once, gunzipped beside the parse.

A trace is opened once and never sought back (it may be a FIFO). A gzip trace is decompressed
in a thread of its own: zlib releases the GIL while it inflates, so on two cores the next
block is decompressed while the parser works on this one, and the parse costs the time of the
slower of the two rather than of both. The blocks go through a small bounded queue, so memory
stays a few MB whatever the file's size.
"""

from __future__ import annotations

import queue
import threading
import zlib
from typing import IO

from trainpace.errors import TraceFormatError

_GZIP_MAGIC = b"\x1f\x8b"
_IN_BYTES = 1 << 14  # compressed bytes per read: ~0.3-0.5 MB of trace JSON
_OUT_BYTES = 1 << 18  # decompressed bytes per block handed to the parser (one piece)
_QUEUE_BLOCKS = 4
_GZIP = 16 + zlib.MAX_WBITS  # zlib's window bits for a gzip header and trailer


class _DamagedError(Exception):
    """The gzip stream ends too early or does not inflate."""


class _Gunzip(threading.Thread):
    """Reads and decompresses a gzip file (all its members) into a queue of blocks; ends the
    queue with None, or with the exception that stopped it."""

    def __init__(self, head: bytes, raw: IO[bytes]) -> None:
        super().__init__(name="trainpace-gunzip", daemon=True)
        self.head, self.raw = head, raw
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
            self._inflate()
        except BaseException as exc:  # noqa: BLE001 - handed to the reading thread
            self._put(exc)
        else:
            self._put(None)

    def _inflate(self) -> None:
        inflater = zlib.decompressobj(_GZIP)
        pending = self.head
        while not self.stop.is_set():
            data = pending or self.raw.read(_IN_BYTES)
            pending = b""
            if not data:
                break
            if inflater.eof:  # another member may follow; gzip allows zero padding
                data = data.lstrip(b"\x00")
                if not data:
                    continue
                inflater = zlib.decompressobj(_GZIP)
            while data:
                out = inflater.decompress(data, _OUT_BYTES)
                if out and not self._put(out):
                    return
                if inflater.eof:
                    pending = inflater.unused_data
                    break
                data = inflater.unconsumed_tail
        if not inflater.eof and not self.stop.is_set():
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
        self._gunzip: _Gunzip | None = None
        self._done = False

    def __enter__(self) -> Source:
        try:
            self._raw = open(self.path, "rb")  # closed in __exit__
            self._head = self._raw.read(2)  # a buffered read: 2 bytes unless the file is shorter
        except OSError as exc:
            raise TraceFormatError(f"{self.path}: cannot read it ({exc.strerror or exc})") from exc
        if self._head == _GZIP_MAGIC:
            self._gunzip = _Gunzip(self._head, self._raw)
            self._head = b""
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
        if self._gunzip is None:
            head, self._head = self._head, b""
            try:
                block = head + self._raw.read(max(size - len(head), 0)) if size > len(head) \
                    else head
            except OSError as exc:
                raise TraceFormatError(f"{self.path}: cannot read it ({exc})") from exc
            self._done = not block
            return block
        item = self._gunzip.blocks.get()
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
