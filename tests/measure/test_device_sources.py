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
