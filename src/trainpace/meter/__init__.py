"""The Meter (the facade a training loop uses) and the parts it wires; see
:mod:`trainpace.meter.facade`."""

from trainpace.meter.facade import Meter

__all__ = ["Meter"]
