"""The bytes of a trace file, cut into pieces of whole events and decoded.

The file is streamed in one pass: gzip is decompressed in blocks as the parse needs them
(:mod:`.source`), the ``traceEvents`` array is cut at event boundaries into pieces of about
128 KB, and each piece is decoded and handed to a sink,
then dropped. Cutting is safe without a JSON tokenizer: a piece ends at a ``}`` followed by
``,`` or ``]``. If that ``}`` was inside a string or a nested object, the piece does not parse
*and* the parse fails at its very end; a failure anywhere else is damage in the file, reported
with its offset.

A piece is decoded by msgspec into small typed records holding only the fields the analysis
reads, typed by the event's phase (an event of another phase than "X" becomes an empty record):
the rest of each event is skipped without building Python objects, and the records
are not tracked by the garbage collector (they hold no references that could form a cycle),
which together make the decoding several times faster than a generic parse. A piece msgspec
refuses (bad JSON, an unexpected type) is parsed again by orjson into dicts, which the sink
checks field by field, and orjson's error position tells a bad cut from damage.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from types import GenericAlias
from typing import Any, Protocol, Union

import msgspec
import orjson

from trainpace.errors import TraceFormatError
from trainpace.trace.source import Source

_WS = b" \t\r\n"
_KEY = b'"traceEvents"'
_COMMA, _BRACKET = ord(","), ord("]")
_HEADER_LIMIT = 64 << 20
# Bounds on what is held in memory at once, whatever the file says (a small gzip can hold
# gigabytes of one string): the keys after the events, one event, a run of whitespace, and a
# document in an unusual layout (read whole). A real trace is far inside each.
_TRAILER_LIMIT = 64 << 20
_EVENT_LIMIT = 64 << 20
_WHITESPACE_LIMIT = 64 << 20
_WHOLE_LIMIT = 1 << 30
_WS_RUN = re.compile(rb"[ \t\r\n]*")
_TRAILING = "unexpected content after document"  # orjson's message for it
_TRUNCATED = "Input data was truncated"  # msgspec's, for text that ends inside a value

_MISSING_TIME = float("nan")  # JSON has no NaN: a time still NaN after decoding was absent


def _keys(text: bytes | bytearray) -> Any:
    """The keys around the events, parsed as the stdlib reads them: a few hundred bytes, where
    orjson would turn an integer beyond 64 bits into a float. Raises ValueError (not JSON, or
    not UTF-8)."""
    import json  # already loaded by orjson

    return json.loads(text)


def _utf8(text: memoryview) -> bool:
    try:
        str(text, "utf-8")
    except UnicodeDecodeError:
        return False
    return True


class EventArgs(msgspec.Struct, gc=False):
    """The arguments of an event the analysis reads (others are skipped unparsed).

    Ids are -1 when absent; a value that is not an integer makes msgspec refuse the piece,
    which then goes the careful way (orjson and a check of every field).
    """

    stream: int = -1
    correlation: int = -1
    external_id: int = msgspec.field(default=-1, name="External id")
    external_id_old: int = msgspec.field(default=-1, name="external id")
    device: int = -1


class Event(msgspec.Struct, gc=False, tag_field="ph", tag="X"):
    """The fields of a complete (``"ph": "X"``) event the analysis reads; absent ones take a
    value that says so, so that every field can be read into a column without a check per
    event."""

    cat: str | None = None
    name: str | None = None
    ts: float = _MISSING_TIME  # msgspec takes a JSON integer too, as a float
    dur: float = _MISSING_TIME
    tid: int | str = -1  # the thread (host events) or stream (device events); old traces: str
    args: EventArgs = msgspec.field(default_factory=EventArgs)


# Every other phase of the Trace Event Format, as a record without fields: the decoder picks
# the type by "ph" and skips the rest of such an event unparsed (flow arrows, instant events
# and counters are a third of a Kineto trace). A phase not listed, or an event without "ph",
# makes msgspec refuse the piece, which then goes the careful way.
OTHER_PHASES = ("B", "E", "i", "I", "C", "b", "n", "e", "S", "T", "p", "F", "s", "t", "f",
                "P", "O", "N", "D", "M", "V", "v", "R", "c", "(", ")")
_OTHERS = tuple(msgspec.defstruct(f"Phase{i}", [], tag_field="ph", tag=ph, gc=False)
                for i, ph in enumerate(OTHER_PHASES))
# A piece: one of these per event (a Union of types made at run time: no static type).
EVENTS: Any = GenericAlias(list, (Union.__getitem__((Event, *_OTHERS)),))
_DECODER = msgspec.json.Decoder(EVENTS)


class Sink(Protocol):
    """Where decoded pieces go."""

    def add(self, events: list[Any]) -> None: ...  # dicts from orjson

    def add_records(self, events: list[Any]) -> None: ...  # Event or another phase's


class Stream:
    """Walks the document: the keys around ``traceEvents`` and the events in pieces."""

    def __init__(self, source: Source, path: str, chunk_bytes: int, sink: Sink) -> None:
        self.source, self.path, self.chunk, self.sink = source, path, max(chunk_bytes, 64), sink
        self.buf = bytearray()
        self.pos = 0
        self.offset = 0  # position of buf[0] in the decompressed stream
        self.hold: int | None = None  # keep the bytes from here (absolute) when reading on
        self.eof = False

    # -- buffer
    def _more(self, want: int) -> bool:
        """Read until ``want`` bytes lie after pos (or the end); False if nothing was added.

        The buffer is one bytearray, trimmed and extended in place: a fresh megabyte-sized
        bytes object per read would cost its page faults again each time.
        """
        if self.eof or len(self.buf) - self.pos >= want:
            return False
        keep = self.pos if self.hold is None else min(self.pos, self.hold - self.offset)
        drop = keep - 1  # the byte before pos stays: a piece is decoded in place (_piece)
        if drop > 0:
            del self.buf[:drop]
            self.offset += drop
            self.pos -= drop
        have = len(self.buf) - self.pos
        added = 0
        while have < want:
            block = self.source.read(max(want - have, 1 << 16))
            if not block:
                self.eof = True
                break
            self.buf += block
            have += len(block)
            added += len(block)
        return added > 0 or self.eof

    def _skip_ws(self) -> int:
        """Skip whitespace (at most :data:`_WHITESPACE_LIMIT` bytes in a row); return the next
        byte, or -1 at the end of the file."""
        run = 0
        while True:
            start = self.pos
            self.pos = _WS_RUN.match(self.buf, self.pos).end()  # type: ignore[union-attr]
            run += self.pos - start
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if self.eof:
                return -1
            if run > _WHITESPACE_LIMIT:
                raise self._fail(f"more than {_mb(_WHITESPACE_LIMIT)} of whitespace in a row at "
                                 f"byte {self.offset + self.pos - run}: not a profiler trace")
            self._more(self.chunk)

    def _fail(self, what: str) -> TraceFormatError:
        return TraceFormatError(f"{self.path}: {what}")

    # -- document
    def run(self) -> dict[str, Any]:
        """Read the document: its events go to the sink; returns its other keys."""
        try:
            return self._document()
        except RecursionError:
            raise self._fail("nested more deeply than a profiler trace is (a damaged or "
                             "hand-made file)") from None

    def _document(self) -> dict[str, Any]:
        self._more(self.chunk)
        if self.buf.startswith(b"\xef\xbb\xbf"):
            self.pos = 3
        first = self._skip_ws()
        if first == -1:
            raise self._fail("the file is empty")
        if first == ord("["):  # the JSON Array Format: events only
            self.pos += 1
            self._events()
            if self._skip_ws() != -1:
                raise self._fail("unexpected data after the array of events")
            return {}
        if first != ord("{"):
            start = bytes(self.buf[self.pos:self.pos + 20])
            raise self._fail(f"not JSON: it starts with {start!r}")
        self.hold = self.offset + self.pos
        meta = self._header()
        if meta is None:
            self.pos = self.hold - self.offset
            return self._whole()
        self.hold = None
        self._events()
        return {**meta, **self._trailer()}

    def _header(self) -> dict[str, Any] | None:
        """The keys before ``traceEvents``; None if the key is not where streaming can use it."""
        while (k := self.buf.find(_KEY, self.pos)) < 0:
            if self.eof or len(self.buf) - self.pos > _HEADER_LIMIT:
                return None
            self._more(len(self.buf) - self.pos + self.chunk)
        head = self.buf[self.pos:k].rstrip(_WS)
        self.pos = k + len(_KEY)
        if self._skip_ws() != ord(":"):
            return None
        self.pos += 1
        if self._skip_ws() != ord("["):
            return None
        self.pos += 1
        if head == b"{":
            return {}
        if not head.endswith(b","):
            return None
        try:
            meta = _keys(head[:-1] + b"}")
        except ValueError:
            return None  # the key sat inside another value
        return meta if isinstance(meta, dict) else None

    def _events(self) -> None:
        """Parse the array's elements, a piece at a time, up to and including its ``]``."""
        want = self.chunk
        while True:
            nxt = self._skip_ws()
            if nxt == _BRACKET:
                self.pos += 1
                return
            if nxt == -1:
                raise self._fail("the file ends inside traceEvents: it is truncated")
            self._more(want)
            done = self._piece()
            if done is None:
                if self.eof:
                    raise self._fail(
                        f"the file ends inside traceEvents (byte {self.offset + self.pos}): "
                        "it is truncated or not valid JSON"
                    )
                if want > _EVENT_LIMIT:
                    raise self._fail(f"an event at byte {self.offset + self.pos} runs past "
                                     f"{_mb(_EVENT_LIMIT)}: not a profiler trace")
                want *= 2
                continue
            want = self.chunk
            if done:
                return

    def _piece(self) -> bool | None:
        """Parse a piece of whole events from the buffer: True at the array's end, False after
        a piece, None if no cut point in the buffer parses (more data is needed).

        The longest pieces are tried first (the last cut points); if the last few all fall
        inside strings, the shortest ones, so a long string full of "}," still makes progress.
        """
        buf, start = self.buf, self.pos - 1
        for _, k in self._cuts():
            # The piece is decoded where it lies, as "[" + its events + "]": the consumed byte
            # before it and its separator stand in for the brackets while it is read.
            before, separator = buf[start], buf[k]
            buf[start], buf[k] = ord("["), _BRACKET
            try:
                with memoryview(buf) as whole, whole[start:k + 1] as text:
                    used = self._decode(text)
            finally:
                buf[start], buf[k] = before, separator
            if used is None:
                continue
            if used < k + 1 - start:  # the array closed inside the piece: keys follow it
                self.pos = start + used
                return True
            self.pos = k + 1
            return separator == _BRACKET
        return None

    def _decode(self, text: memoryview) -> int | None:
        """Hand the events of ``text`` (a JSON array) to the sink; return how many bytes of it
        they took, or None if the cut was bad.

        Fewer bytes than ``text`` means the events array itself ended inside the piece: the cut
        fell after it, in keys that follow ``traceEvents`` (``"deviceProperties": [{..}]``).
        """
        try:
            self.sink.add_records(_DECODER.decode(text))
            return len(text)
        except msgspec.DecodeError as exc:
            # The usual bad cut: it fell inside a string, which then runs to the end of the
            # piece. orjson would only say so after building most of the piece as dicts (1.5 MB
            # for 128 KB, the peak of a small trace's analysis); it is still asked when the
            # piece is not UTF-8, to report the damage as before.
            if str(exc) == _TRUNCATED and _utf8(text):
                return None
            # else orjson says what is wrong, or takes what msgspec would not type
        try:
            events = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            if not exc.doc:  # not UTF-8: damage (a cut, at an ASCII '}', cannot split a character)
                raise self._fail(f"not valid JSON after byte {self.offset + self.pos - 1}: "
                                 f"{exc.msg}") from exc
            at = len(exc.doc[:exc.pos].encode())  # orjson counts characters, the buffer bytes
            if exc.msg == _TRAILING:  # a whole array, then what follows traceEvents
                return self._decode(text[:at])
            if exc.pos < len(exc.doc) - 1:
                raise self._fail(
                    f"not valid JSON at byte {self.offset + self.pos - 1 + at}: {exc.msg}"
                ) from exc
            return None  # the cut was inside a string or a nested object
        self.sink.add(events)
        return len(text)

    def _cuts(self) -> Iterator[tuple[int, int]]:
        """Cut points ``(j, k)``: a ``}`` at j whose next non-space byte, at k, is , or ]."""
        buf, start = self.buf, self.pos

        def separator(j: int) -> int:
            k = _WS_RUN.match(buf, j + 1).end()  # type: ignore[union-attr]
            return k if k < len(buf) and buf[k] in (_COMMA, _BRACKET) else -1

        hi, tried = len(buf), 0
        while tried < 4 and (j := buf.rfind(b"}", start, hi)) >= 0:
            hi = j
            if (k := separator(j)) >= 0:
                tried += 1
                yield j, k
        lo = start
        while (j := buf.find(b"}", lo, hi)) >= 0:
            lo = j + 1
            if (k := separator(j)) >= 0:
                yield j, k

    def _trailer(self) -> dict[str, Any]:
        """The keys after the ``traceEvents`` array (at most :data:`_TRAILER_LIMIT`)."""
        while self._more(len(self.buf) - self.pos + self.chunk):
            if len(self.buf) - self.pos > _TRAILER_LIMIT:
                raise self._fail(f"more than {_mb(_TRAILER_LIMIT)} after traceEvents (a "
                                 "profiler writes a few kB there): not a profiler trace")
        tail = self.buf[self.pos:].strip(_WS)
        if tail == b"}":
            return {}
        if not tail:
            raise self._fail("the file ends after traceEvents without its closing '}': "
                             "it is truncated")
        if not tail.startswith(b","):
            raise self._fail(f"unexpected data after traceEvents: {bytes(tail[:20])!r}")
        try:
            meta = _keys(b"{" + tail[1:])
        except ValueError as exc:  # a JSONDecodeError has its message; the other: not UTF-8
            what = getattr(exc, "msg", "not UTF-8")
            raise self._fail(f"not valid JSON after traceEvents: {what}") from exc
        if not isinstance(meta, dict):  # pragma: no cover - '{' always parses to a dict
            raise self._fail("not valid JSON after traceEvents")
        return meta

    def _whole(self) -> dict[str, Any]:
        """The fallback for an unusual layout: parse the whole document at once (at most
        :data:`_WHOLE_LIMIT`)."""
        while self._more(len(self.buf) - self.pos + (64 << 20)):
            if len(self.buf) - self.pos > _WHOLE_LIMIT:
                raise self._fail(f"'traceEvents' is not within the first {_mb(_HEADER_LIMIT)} "
                                 f"and the file is larger than {_mb(_WHOLE_LIMIT)}, the most "
                                 "read whole: not a profiler trace as torch.profiler writes it")
        try:
            doc = orjson.loads(self.buf[self.pos:])
        except orjson.JSONDecodeError as exc:
            raise self._fail(f"not valid JSON ({exc.msg})") from exc
        self.buf = bytearray()
        if not isinstance(doc, dict):
            raise self._fail(f"JSON but not a trace: a {type(doc).__name__} at the top level")
        events = doc.pop("traceEvents", None)
        if events is None:
            keys = ", ".join(sorted(map(str, doc))[:8]) or "none"
            raise self._fail(
                f"JSON but not a profiler trace: no 'traceEvents' key (keys: {keys})"
            )
        if not isinstance(events, list):
            raise self._fail(f"'traceEvents' is a {type(events).__name__}, not a list")
        for i in range(0, len(events), 100_000):
            self.sink.add(events[i:i + 100_000])
        return doc


def _mb(n: int) -> str:
    return f"{n >> 20} MB"
