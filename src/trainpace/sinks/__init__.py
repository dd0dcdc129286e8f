"""Where records go: the run folder, the console line, TensorBoard (one small interface)."""

from trainpace.sinks.base import FanOut, NullSink, Sink

__all__ = ["FanOut", "NullSink", "Sink"]
