"""Where records go: the run folder, the console line, TensorBoard, W&B, MLflow, Prometheus
(one small interface, one metric naming: :mod:`trainpace.sinks.names`)."""

from trainpace.sinks.base import FanOut, Sink
from trainpace.sinks.options import sinks_from_options

__all__ = ["FanOut", "Sink", "sinks_from_options"]
