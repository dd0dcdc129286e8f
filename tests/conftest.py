from __future__ import annotations

import signal

import pytest

from manual_clock import ManualClock


def pytest_configure(config: pytest.Config) -> None:
    """Ctrl-C as at a terminal, however the suite was started. A shell without job control
    starts a background command (``cmd &``) with SIGINT ignored, and an ignored signal stays
    ignored across exec: every Python process the tests start would then ignore the SIGINTs
    they send it (``trainpace run`` killed by one, the Meter's Ctrl-C tests). A handler of
    this process's own is reset to the default in each child."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


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
