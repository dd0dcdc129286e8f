"""Any ledger: read_job names what it skips and goodput() still sums to the wall time."""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from job.goodput_jobs import killed_and_restarted
from trainpace.job import events as ev
from trainpace.job.goodput import goodput
from trainpace.job.ledger import read_job
from trainpace.summary_goodput import GOODPUT_CATEGORIES

_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-5, 2**60),
                    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=8),
                    st.lists(st.integers(), max_size=2))
_EVENTS = st.fixed_dictionaries(
    {"schema": st.sampled_from([ev.SCHEMA, ev.SCHEMA, "other/1"]),
     "event": st.sampled_from([*ev.EVENT_KEYS, "lunch"]),
     "run": st.one_of(st.integers(0, 4), _VALUES),
     "unix_s": st.one_of(st.floats(1.8e9, 1.8e9 + 100), _VALUES)},
    optional={key: _VALUES for keys in ev.EVENT_KEYS.values() for key in keys})


@settings(max_examples=60, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(extra=st.lists(_EVENTS, max_size=6), junk=st.binary(max_size=40))
def test_any_ledger_reads_and_sums_to_the_wall(extra: list[dict], junk: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = killed_and_restarted(Path(tmp) / "job")
        with (folder / ev.LEDGER_FILE).open("ab") as stream:
            for event in extra:
                stream.write(json.dumps(event).encode() + b"\n")
            stream.write(junk)
        result = goodput(read_job(folder))
        assert result.wall_s is not None and math.isfinite(result.wall_s)
        parts = [getattr(result.categories, f"{name}_s") or 0.0 for name in GOODPUT_CATEGORIES]
        assert math.isclose(sum(parts) + (result.productive_s or 0.0), result.wall_s,
                            rel_tol=1e-9, abs_tol=1e-6)
