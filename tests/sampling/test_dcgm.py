import logging
import sys

import pytest

from trainpace.errors import DeviceError
from trainpace.sampling.dcgm import FIELDS, Dcgm, open_reader


class FakeReader:
    def __init__(self, values):
        self.values = values
        self.closed = False

    def GetLatestGpuValuesAsFieldIdDict(self):  # noqa: N802 - DCGM's name
        if isinstance(self.values, Exception):
            raise self.values
        return self.values

    def Shutdown(self):  # noqa: N802 - DCGM's name
        self.closed = True


def test_ratios_become_percentages_and_blanks_are_null():
    reader = FakeReader({3: {1002: 0.5, 1003: 0.25, 1004: 0.0, 1005: 140737488355328.0}})
    dcgm = Dcgm([3], reader=reader)
    assert dcgm.read() == {3: {
        "dcgm_sm_active_pct": 50.0, "dcgm_sm_occupancy_pct": 25.0,
        "dcgm_tensor_active_pct": 0.0, "dcgm_dram_active_pct": None,
    }}
    dcgm.close()
    assert reader.closed


def test_a_gpu_without_values_and_junk_values_are_null():
    dcgm = Dcgm([0, 1], reader=FakeReader({0: {1002: "x", 1005: float("nan")}}))
    assert dcgm.read() == {0: dict.fromkeys(FIELDS.values()), 1: dict.fromkeys(FIELDS.values())}


def test_a_failing_reader_gives_nothing_logged_once(caplog):
    caplog.set_level(logging.INFO, logger="trainpace.sampling.dcgm")
    dcgm = Dcgm([0], reader=FakeReader(RuntimeError("host engine down")))
    assert dcgm.read() == {}
    assert dcgm.read() == {}
    assert [r.getMessage() for r in caplog.records] == [
        "trainpace: DCGM reading failed (RuntimeError: host engine down); its fields are null"]


def test_without_bindings_opening_is_a_device_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "DcgmReader", None)
    with pytest.raises(DeviceError, match="DCGM's Python bindings do not import; add DCGM's"):
        open_reader([0], 0.1)


def test_a_reader_that_cannot_connect_is_a_device_error(monkeypatch):
    class Module:
        class DcgmReader:
            def __init__(self, **kwargs):
                self.kwargs = kwargs
                self.m_dcgmHandle = None

            def Init(self):  # noqa: N802 - DCGM's name
                pass

    monkeypatch.setitem(sys.modules, "DcgmReader", Module)
    with pytest.raises(DeviceError, match="cannot connect to nv-hostengine"):
        open_reader([0], 0.05)
