from __future__ import annotations

import pytest


class ManualClock:
    """A clock the test advances by hand: injected delays with exactly known truth."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture(scope="session")
def _empty_cache_dir(tmp_path_factory: pytest.TempPathFactory):
    return tmp_path_factory.mktemp("trainpace-cache")


@pytest.fixture(autouse=True)
def _hermetic_cache(_empty_cache_dir, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test sees the ceilings a developer measured on this machine (CI has none)."""
    monkeypatch.setenv("TRAINPACE_CACHE_DIR", str(_empty_cache_dir))
