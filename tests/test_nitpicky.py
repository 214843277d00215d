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


@pytest.mark.parametrize(
    "target", ["{py:func}`eigprec.no_such_function`", "{py:data}`NO_SUCH_CONSTANT`"]
)
def test_unresolved_python_reference_fails(tmp_path, target):
    result = _build(tmp_path, "refs", f"# Refs\n\nSee {target}.\n")
    out = result.stdout + result.stderr
    assert result.returncode != 0
    assert target.split("`")[1] in out


def test_torch_numpy_and_standard_library_types_are_exempt(tmp_path):
    page = (
        "# Types\n\n"
        "{py:class}`torch.Tensor`, {py:class}`torch.Generator`, {py:class}`numpy.ndarray`,\n"
        "{py:class}`matplotlib.figure.Figure`, {py:class}`collections.abc.Callable`,\n"
        "{py:class}`~torch.dtype`, {py:func}`functools.wraps`, "
        "{py:class}`eigprec_book.helpers.T`.\n"
    )
    result = _build(tmp_path, "types", page)
    assert result.returncode == 0, result.stdout + result.stderr
