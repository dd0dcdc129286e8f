"""Every occurrence of many short literals in many texts, found at once with numpy.

Classifying a trace's kernel names asks, for a few hundred names of up to thousands of
characters, which of about a hundred literals each one contains. A regex alternation scans
each name once per category at tens of ns a character, and a ``str`` search per literal
pays a call per literal and name; both cost milliseconds. Here the texts are joined into
one byte array; the positions whose two bytes begin some literal are looked up in a table
(two zero-copy views cover every position), and those few candidates are compared with all
the literals beginning so at once, eight bytes at a time.
"""

from __future__ import annotations

import functools

import msgspec
import numpy as np

_LANE = 8  # bytes compared at a time (one uint64)
_EMPTY = np.zeros(0, dtype=np.int64)


class _Table(msgspec.Struct, frozen=True):  # built in C: no import-time cost
    """The literals grouped by their first two bytes, as arrays."""

    group_of: np.ndarray  # (65536,) int16: a two-byte code's group, -1 when none begins so
    third: np.ndarray  # (groups, 256) bool: may a literal of the group have this third byte
    masks: np.ndarray  # (lanes, groups, per group) uint64: which bytes a literal has
    codes: np.ndarray  # (lanes, groups, per group) uint64: those bytes
    literal: np.ndarray  # (groups, per group): the literal's index, -1 for padding
    lanes: np.ndarray  # (literals,): the lanes each literal spans
    width: int  # bytes compared at most (the longest literal, in whole lanes)


@functools.lru_cache(maxsize=16)
def _table(literals: tuple[str, ...]) -> _Table:
    raw = [lit.encode("ascii") for lit in literals]
    if any(len(b) < 2 or b"\x00" in b for b in raw):
        raise ValueError("literals must be at least 2 ASCII characters, without NUL")
    width = -(-max(len(b) for b in raw) // _LANE) * _LANE
    groups: dict[int, list[int]] = {}
    for i, b in enumerate(raw):
        groups.setdefault(b[0] | (b[1] << 8), []).append(i)  # as a little-endian uint16
    per = max(len(g) for g in groups.values())
    # built as bytes, then viewed as arrays: numpy's per-element assignment costs more
    pad_code = b"\x01" + bytes(width - 1)  # a byte that no mask lets through: never equal
    masks, codes, literal, third = [], [], [], bytearray(256 * len(groups))
    group_of = np.full(1 << 16, -1, dtype=np.int16)
    for g, (first, members) in enumerate(groups.items()):
        group_of[first] = g
        for i in members:
            b = raw[i]
            masks.append(b"\xff" * len(b) + bytes(width - len(b)))
            codes.append(b + bytes(width - len(b)))
            if len(b) > 2:
                third[256 * g + b[2]] = 1
            else:
                third[256 * g : 256 * (g + 1)] = b"\x01" * 256
        padding = per - len(members)
        masks.append(bytes(width * padding))
        codes.append(pad_code * padding)
        literal.extend([*members, *[-1] * padding])
    shape = (len(groups), per, width // _LANE)
    return _Table(
        group_of=group_of,
        third=np.frombuffer(bytes(third), dtype=bool).reshape(len(groups), 256),
        # by lane first, so that each lane's table is contiguous
        masks=np.ascontiguousarray(
            np.frombuffer(b"".join(masks), dtype=np.uint64).reshape(shape).transpose(2, 0, 1)),
        codes=np.ascontiguousarray(
            np.frombuffer(b"".join(codes), dtype=np.uint64).reshape(shape).transpose(2, 0, 1)),
        literal=np.array(literal, dtype=np.int64).reshape(len(groups), per),
        lanes=np.array([-(-len(b) // _LANE) for b in raw], dtype=np.int64),
        width=width,
    )


def occurrences(texts: list[str],
                literals: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every occurrence of every literal in every text: three arrays (text index, literal
    index, start in the text), in no particular order.

    The texts must be ASCII (``str.isascii``), the literals ASCII, 2 characters or longer and
    without NUL; overlapping occurrences are all found.
    """
    if not texts or not literals:
        return _EMPTY, _EMPTY, _EMPTY
    table = _table(literals)
    joined = "\x00".join(texts)  # no literal holds a NUL: none spans two texts
    n = len(joined)
    buf = (joined + "\x00" * (table.width + 1)).encode("ascii")
    # the two-byte code at every position: the even ones, then the odd ones (views, no copy)
    found = []
    for parity in (0, 1):
        pairs = np.frombuffer(buf, dtype="<u2", offset=parity, count=(n - parity + 1) // 2)
        group = table.group_of[pairs]
        at = np.flatnonzero(group >= 0)
        found.append((at * 2 + parity, group[at]))
    start = np.concatenate([found[0][0], found[1][0]])
    group = np.concatenate([found[0][1], found[1][1]])
    keep = table.third[group, np.frombuffer(buf, dtype=np.uint8)[start + 2]]
    start, group = start[keep], group[keep]
    # the eight bytes at each position, as one uint64 (an unaligned view, no copy)
    words = np.ndarray((len(buf) - _LANE + 1,), dtype=np.uint64, buffer=buf, strides=(1,))
    equal = (words[start][:, None] & table.masks[0, group]) == table.codes[0, group]
    row, k = np.divmod(np.flatnonzero(equal), equal.shape[1])  # nonzero() is slow in 2-D
    start, group, lit = start[row], group[row], table.literal[group[row], k]
    for lane in range(1, len(table.masks)):  # the literals longer than eight bytes
        longer = np.flatnonzero(table.lanes[lit] > lane)
        g, kk = group[longer], k[longer]
        ok = ((words[start[longer] + lane * _LANE] & table.masks[lane, g, kk])
              == table.codes[lane, g, kk])
        keep = np.ones(len(lit), dtype=bool)
        keep[longer[~ok]] = False
        start, group, k, lit = start[keep], group[keep], k[keep], lit[keep]
    offsets = np.cumsum([0] + [len(t) + 1 for t in texts[:-1]])
    text = np.searchsorted(offsets, start, side="right") - 1
    return text, lit, start - offsets[text]


__all__ = ["occurrences"]
