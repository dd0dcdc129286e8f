"""The sources of one metered device: what they open is closed with them."""

import os

import torch

from trainpace.measure.device_sources import DeviceSources


def open_fds():
    return len(os.listdir("/proc/self/fd"))


def test_closing_the_sources_closes_the_host_files_they_opened():
    sources = DeviceSources(torch.device("cpu"), clock=lambda: 0.0, nvml=False, dcgm=False,
                            host=None, fault=lambda *args: None)
    before = open_fds()
    sources.open_host()
    sources.host.read()  # opens the /proc files it keeps
    opened = open_fds()
    assert opened > before
    sources.close(lambda where, fn: fn())
    assert len(sources.host._files) == 0 and open_fds() < opened


def test_a_host_source_given_by_the_caller_is_left_open():
    class Given:
        closed = False

        def close(self):
            self.closed = True

    given = Given()
    sources = DeviceSources(torch.device("cpu"), clock=lambda: 0.0, nvml=False, dcgm=False,
                            host=given, fault=lambda *args: None)
    sources.open_host()
    sources.close(lambda where, fn: fn())
    assert given.closed is False


def test_the_jobs_cpu_on_the_host_is_a_flat_series_where_a_reading_has_it():
    class Host:
        def __init__(self, reading):
            self.reading = reading

        def read(self):
            return dict(self.reading)

    alone = {"process_cpu_pct": 90.0}
    among = {"process_cpu_pct": 90.0, "job_cpu_pct": 180.0}  # one of several ranks here
    for reading, job in ((alone, None), (among, 180.0)):
        sources = DeviceSources(torch.device("cpu"), clock=lambda: 0.0, nvml=False,
                                dcgm=False, host=Host(reading), fault=lambda *args: None)
        sources.open_host()
        _, flat = sources.read()
        assert (flat["host.process_cpu_pct"], flat["host.job_cpu_pct"]) == (90.0, job)
