"""Shared fixtures and paths for the test suite."""

from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def book_config() -> dict:
    return yaml.safe_load((ROOT / "_config.yml").read_text())


@pytest.fixture(scope="session")
def toc() -> dict:
    return yaml.safe_load((ROOT / "_toc.yml").read_text())
