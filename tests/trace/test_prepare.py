from __future__ import annotations

import numpy as np
import pytest
from tracekit import HANDMADE, RESNET_NW0, SAMPLED, prepared

from trainpace.trace import intervals as iv
from trainpace.trace.prepare import spans


@pytest.mark.parametrize("path", [HANDMADE, RESNET_NW0, *SAMPLED], ids=lambda p: p.name)
def test_spans_are_the_union_of_the_events(path: object) -> None:
    p = prepared(path)
    c = p.cols
    rng = np.random.default_rng(3)
    masks = [getattr(p, name) for name in ("device", "kernel", "memcpy", "runtime", "cpu_op",
                                           "host", "dataloader", "step_span")]
    masks += [rng.random(len(c)) < share for share in (0.0, 0.01, 0.3, 1.0)]
    for mask in masks:
        got, want = spans(p, mask), iv.union(c.ts[mask], c.end[mask])
        assert got[0].tolist() == want[0].tolist() and got[1].tolist() == want[1].tolist()
    assert p.by_start.tolist() == np.argsort(c.ts, kind="stable").tolist()
