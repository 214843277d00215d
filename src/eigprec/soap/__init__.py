"""SOAP and REKLS, and a monitor that watches their factors.

``core`` holds one SOAP step in a file that needs only torch (its four stages as named
functions); ``optimizer`` the optimizers :class:`SOAP` and :class:`REKLS` built on it (checked
arguments, all-or-nothing steps, checkpoints, the book's options); ``monitor``
:class:`SOAPMonitor`, which reads any SOAP-like optimizer through ``factors``; ``checks`` and
``checkpoint`` what a step and a checkpoint check.
"""

from eigprec.soap.monitor import FactorSignals, SOAPMonitor, SOAPSignals
from eigprec.soap.optimizer import REKLS, SOAP, ema_first_weight

__all__ = ["REKLS", "SOAP", "FactorSignals", "SOAPMonitor", "SOAPSignals", "ema_first_weight"]
