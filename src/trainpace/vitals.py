"""Moved to :mod:`trainpace.measure.vitals` (measurement); kept for older imports."""

from trainpace.measure.vitals import DeviceVitals

__all__ = ["DeviceVitals"]
