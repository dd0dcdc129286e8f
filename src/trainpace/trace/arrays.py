"""Distinct values of a numpy array, without ``np.unique``.

numpy 2's ``np.unique`` imports ``numpy.ma`` on its first call, about 15 ms: as long as the
whole analysis of a small trace. A sort and a comparison of neighbours do the same work.
"""

from __future__ import annotations

import numpy as np


def distinct(values: np.ndarray) -> np.ndarray:
    """The distinct values, sorted (``np.unique(values)``)."""
    ordered = np.sort(values, kind="stable")
    out: np.ndarray = ordered[_firsts(ordered)]
    return out


def distinct_inverse(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct values, sorted, and for each value its index among them
    (``np.unique(values, return_inverse=True)``)."""
    order = np.argsort(values, kind="stable")
    firsts = _firsts(values[order])
    inverse = np.empty(len(values), dtype=np.intp)
    inverse[order] = np.cumsum(firsts) - 1
    return values[order][firsts], inverse


def _firsts(ordered: np.ndarray) -> np.ndarray:
    """For each value of a sorted array, is it the first of its run of equal values."""
    firsts = np.ones(len(ordered), dtype=bool)
    np.not_equal(ordered[1:], ordered[:-1], out=firsts[1:])
    return firsts


def among(values: np.ndarray, members: np.ndarray) -> np.ndarray:
    """For each value, is it one of ``members``, which must be sorted and distinct (what
    :func:`distinct` returns): ``np.isin(values, members)``, which calls ``np.unique``."""
    if len(members) == 0:
        return np.zeros(len(values), dtype=bool)
    at = np.minimum(np.searchsorted(members, values), len(members) - 1)
    return np.asarray(members[at] == values)
