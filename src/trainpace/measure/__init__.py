"""Measurement: the hot-path step recorder, device clocks, batch counting, and the figures."""
