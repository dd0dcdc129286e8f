"""The fuzz suite's budget: a few seconds a property, the whole suite under a minute in CI."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator

from hypothesis import HealthCheck, settings

settings.register_profile(
    "trainpace-fuzz", max_examples=60, deadline=2000, derandomize=True, database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
FUZZ = settings.get_profile("trainpace-fuzz")


@contextlib.contextmanager
def captured() -> Iterator[tuple[io.StringIO, io.StringIO]]:
    """stdout and stderr of a command run in-process, kept."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        yield out, err
