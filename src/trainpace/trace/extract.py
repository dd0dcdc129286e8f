"""The decoded events of a trace as flat columns, made without numpy.

Each piece the stream decodes (:mod:`.stream`) is read a field at a time into stdlib arrays,
through C-level iteration (``map`` over ``attrgetter`` into ``array.extend``), so no Python
code runs per event; the piece is then dropped. An event's (cat, name, tid) becomes the
ordinal of that key among the distinct keys seen so far (a trace repeats a few hundred).
Nothing is checked or filtered here beyond the phase: which events are usable (a cat, a
name, a time) is decided once for all of them when the columns become numpy arrays
(:func:`.load.finish_columns`).
"""

from __future__ import annotations

import math
from array import array
from collections import Counter
from itertools import chain
from operator import attrgetter
from typing import Any

import msgspec

from trainpace.trace.stream import EVENTS, Event

# The reasons an event is skipped, in the order they are checked (the first one counts) and
# reported.
NOT_OBJECT = "not a JSON object"
OTHER_PHASE = "other phases (not 'X')"
NO_CAT = "no cat (HTA drops these too)"
NO_NAME = "malformed: name or cat missing or not a string"
NO_TIME = "malformed: ts or dur missing or not a number"
OUT_OF_RANGE = "malformed: ts or dur negative, infinite or out of range"
REASONS = (NOT_OBJECT, OTHER_PHASE, NO_CAT, NO_NAME, NO_TIME, OUT_OF_RANGE)

_TS, _DUR, _ARGS = (attrgetter(f) for f in ("ts", "dur", "args"))
_KEY = attrgetter("cat", "name", "tid")
# The ids of an event's args as one tuple made in C: astuple reads the struct's slots in their
# order, EventArgs' field order (tested), in 0.6x the time of an attrgetter of the five names.
ID_FIELDS = ("stream", "correlation", "external_id", "external_id_old", "device")
_ARG_IDS = msgspec.structs.astuple
N_IDS = len(ID_FIELDS)
_MISSING = float("nan")


class _Ordinals(dict[Any, int]):
    """A key's ordinal: its place among the distinct keys, in order of first appearance.
    Looking up a known key is dict's own C lookup; only a new key runs Python."""

    def __missing__(self, key: Any) -> int:
        ordinal = self[key] = len(self)
        return ordinal


def _as_int(value: Any) -> int:
    """An id or stream number, as HTA reads it (int() of it), or -1."""
    if isinstance(value, bool) or value is None:
        return -1
    try:
        number = int(value)
    except (TypeError, ValueError, OverflowError):
        return -1
    return number if -(2**63) <= number < 2**63 else -1


def _time_us(value: Any) -> float:
    """A finite time in µs, or NaN (the column's mark of a time that is not one)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return _MISSING
    try:
        number = float(value)
    except OverflowError:
        return _MISSING
    return number if math.isfinite(number) else _MISSING


def _text(value: Any) -> str | bool | None:
    """A cat or name as a key holds it: a str, None when absent, False when it is no string
    (the two are skipped for different reasons)."""
    return value if value is None or isinstance(value, str) else False


def _tid(value: Any) -> int | str:
    """A thread id as a key holds it: an int or a str as written, anything else -1."""
    if isinstance(value, str) or (type(value) is int and -(2**63) <= value < 2**63):
        return value
    return -1


class EventColumns:
    """The complete events read so far, a flat array per field (the sink of a stream).

    ``key`` holds each event's ordinal in ``keys`` (its (cat, name, tid); cat or name None
    when absent, False when not a string); ``ts`` and ``dur`` are NaN where absent or not a
    number; ``ids`` holds the five ids of each event in :data:`ID_FIELDS` order, -1 where
    absent.
    """

    def __init__(self) -> None:
        self.keys: dict[Any, int] = _Ordinals()
        self.key = array("q")
        self.ts = array("d")
        self.dur = array("d")
        self.ids = array("q")
        self.events_total = 0
        self.skipped: Counter[str] = Counter()  # what is known at reading: phases, not objects

    def add(self, events: list[Any]) -> None:
        """Events parsed by orjson (dicts): typed like msgspec's, else read one by one."""
        try:
            records = msgspec.convert(events, EVENTS)
        except msgspec.ValidationError:
            self._careful(events)
        else:
            self.add_records(records)

    def add_records(self, records: list[Any]) -> None:
        """Events decoded by msgspec (types already checked, absent fields marked): an
        :class:`Event` for each complete event, a record of another type for other phases."""
        # The phase filter is a comprehension: most traces hold many non-'X' events (flow
        # arrows), and one Python loop costs less than a mask built and applied.
        events: list[Event] = [e for e in records if type(e) is Event]
        if len(events) < len(records):
            self.skipped[OTHER_PHASE] += len(records) - len(events)
        start = len(self.key)
        try:
            self.ids.extend(chain.from_iterable(map(_ARG_IDS, map(_ARGS, events))))
        except OverflowError:  # an id beyond 64 bits: read one by one, as the others are
            del self.ids[start * N_IDS:]
            self._careful([msgspec.to_builtins(e) for e in records], counted=True)
            return
        self.events_total += len(records)
        self.key.extend(map(self.keys.__getitem__, map(_KEY, events)))
        self.ts.extend(map(_TS, events))
        self.dur.extend(map(_DUR, events))

    def _careful(self, events: list[Any], *, counted: bool = False) -> None:
        """Event by event, each field checked; events that are no complete event are counted
        and skipped, the others take the marks of absence the typed path gives."""
        self.events_total += len(events)
        if counted:  # the phases were counted already
            events = [e for e in events if isinstance(e, dict) and e.get("ph") == "X"]
        for e in events:
            if not isinstance(e, dict):
                self.skipped[NOT_OBJECT] += 1
                continue
            if e.get("ph") != "X":
                self.skipped[OTHER_PHASE] += 1
                continue
            args = e.get("args")
            if not isinstance(args, dict):
                args = {}
            ext = args.get("External id")
            key = (_text(e.get("cat")), _text(e.get("name")), _tid(e.get("tid")))
            self.key.append(self.keys[key])
            self.ts.append(_time_us(e.get("ts")))
            self.dur.append(_time_us(e.get("dur")))
            self.ids.extend((_as_int(args.get("stream", -1)),
                             _as_int(args.get("correlation", -1)),
                             _as_int(args.get("external id", -1) if ext is None else ext),
                             -1,
                             _as_int(args.get("device", -1))))
