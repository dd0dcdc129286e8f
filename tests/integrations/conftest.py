import pytest

from trainpace.measure.device_sources import DeviceSources


@pytest.fixture
def without_host_readings(monkeypatch):
    """The Meters read no host. Their runs are on the manual clock, and the real host's CPU
    (known, or not, by how long a run took in real time, which no test sets) would decide the
    figures that judge other processes' share: ``slowed_by_others`` and the steady rates."""
    monkeypatch.setattr(DeviceSources, "open_host", lambda self: None)
