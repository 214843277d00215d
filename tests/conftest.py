"""Shared test configuration.

emerging-optimizers 0.3.0 (a test-only cross-check dependency) declares Python ≥ 3.12, but on
3.11 the only thing it lacks is ``typing.override`` (PEP 698), a decorator that has no effect
at run time. Providing that one name lets the cross-check run on 3.11 as well.
"""

import sys
import typing

if sys.version_info < (3, 12) and not hasattr(typing, "override"):

    def _override(method):  # the 3.12 decorator only sets __override__ for type checkers
        method.__override__ = True
        return method

    typing.override = _override
