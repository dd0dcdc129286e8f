from __future__ import annotations

import pytest

from manual_clock import ManualClock


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
