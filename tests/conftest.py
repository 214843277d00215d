"""Shared fixtures and paths for the test suite.

emerging-optimizers 0.3.0 (a test-only cross-check dependency) declares Python ≥ 3.12, but on
3.11 the only thing it lacks is ``typing.override`` (PEP 698), a decorator that has no effect
at run time. Providing that one name lets the cross-check run on 3.11 as well.
"""

import sys
import typing
from pathlib import Path

import pytest
import yaml

if sys.version_info < (3, 12) and not hasattr(typing, "override"):

    def _override(method):  # as in 3.12: mark for type checkers where possible, else no-op
        try:
            method.__override__ = True
        except (AttributeError, TypeError):
            pass
        return method

    typing.override = _override

ROOT = Path(__file__).resolve().parents[1]


def notebook(cells: list[str], first: list[dict] | None = None) -> dict:
    """A minimal nbformat-4 notebook of code cells (ids c0, c1, …), as the fixtures write them.

    Args:
        cells: the code cells' sources.
        first: cells to put before them (a title, say).

    Returns:
        The notebook as a JSON-ready dict.
    """
    code = [
        {
            "cell_type": "code",
            "execution_count": None,
            "id": f"c{i}",
            "metadata": {},
            "outputs": [],
            "source": src,
        }
        for i, src in enumerate(cells)
    ]
    return {
        "cells": [*(first or []), *code],
        "metadata": {
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }


@pytest.fixture(scope="session")
def book_config() -> dict:
    return yaml.safe_load((ROOT / "_config.yml").read_text())


@pytest.fixture(scope="session")
def toc() -> dict:
    return yaml.safe_load((ROOT / "_toc.yml").read_text())


def _precision_state() -> dict:
    import torch

    state = {"cudnn.allow_tf32": torch.backends.cudnn.allow_tf32}
    for path in ("", "cuda.matmul", "mkldnn.matmul", "mkldnn.conv", "cudnn.conv"):
        obj = torch.backends
        for part in filter(None, path.split(".")):
            obj = getattr(obj, part, None)
        if obj is not None and hasattr(obj, "fp32_precision"):
            state[path or "fp32"] = obj.fp32_precision
    return state


@pytest.fixture(autouse=True)
def _no_leaked_precision(request):
    """Every test leaves torch's precision settings as it found them (the package promises
    to; a test that leaked would also change the tests after it)."""
    before = _precision_state()
    yield
    after = _precision_state()
    assert after == before, f"{request.node.nodeid} leaked precision state: {before} -> {after}"
