"""The strict build is nitpicky (-n): a cross-reference that resolves nowhere fails it,
except the third-party types exempted by nitpick_ignore_regex in _config.yml.

Built as tests/test_build_strictness.py builds: a one-page book with the project's own
_config.yml and the flags of the Makefile's strict-book target.
"""

import pytest

from .test_build_strictness import JUPYTER_BOOK, _build, _strict_flags

pytestmark = pytest.mark.skipif(not JUPYTER_BOOK.exists(), reason="jupyter-book not installed")


def test_strict_flags_are_nitpicky():
    assert "-n" in _strict_flags()


def test_unresolved_python_reference_fails(tmp_path):
    page = "# Refs\n\nSee {py:func}`eigprec.no_such_function`.\n"
    result = _build(tmp_path, "refs", page)
    out = result.stdout + result.stderr
    assert result.returncode != 0
    assert "eigprec.no_such_function" in out


def test_torch_numpy_and_standard_library_types_are_exempt(tmp_path):
    page = (
        "# Types\n\n"
        "{py:class}`torch.Tensor`, {py:class}`torch.Generator`, {py:class}`numpy.ndarray`,\n"
        "{py:class}`matplotlib.figure.Figure`, {py:class}`collections.abc.Callable`,\n"
        "{py:class}`~torch.dtype`.\n"
    )
    result = _build(tmp_path, "types", page)
    assert result.returncode == 0, result.stdout + result.stderr
