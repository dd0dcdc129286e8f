from __future__ import annotations

import subprocess
import sys

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from tracekit import SAMPLED

from trainpace.trace.arrays import among, distinct, distinct_inverse

ints = st.lists(st.integers(min_value=-5, max_value=5), max_size=40)


@given(ints)
def test_distinct_is_numpys_unique(values: list[int]) -> None:
    a = np.array(values, dtype=np.int64)
    assert distinct(a).tolist() == np.unique(a).tolist()
    got, inverse = distinct_inverse(a)
    want, want_inverse = np.unique(a, return_inverse=True)
    assert got.tolist() == want.tolist() and inverse.tolist() == want_inverse.tolist()


@given(ints, ints)
def test_among_is_numpys_isin(values: list[int], members: list[int]) -> None:
    a, m = np.array(values, dtype=np.int64), np.array(members, dtype=np.int64)
    assert among(a, distinct(m)).tolist() == np.isin(a, m).tolist()


def test_analysis_does_not_import_numpy_ma_or_psutil() -> None:
    # Either import costs about 15 ms: as much as analyzing a small trace.
    code = ("import sys; from trainpace.trace import analyze_traces; "
            f"analyze_traces([{str(SAMPLED[0])!r}]); "
            "print(sorted(m for m in ('numpy.ma', 'psutil') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == "[]"
