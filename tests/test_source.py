"""show_source: the package's real code, with its location, in HTML and text."""

import inspect

import pytest

import eigprec
from eigprec import show_source
from eigprec.runtime import RuntimeInfo


def test_function_source_is_the_real_source():
    listing = show_source(eigprec.full_scale)
    lines, first = inspect.getsourcelines(eigprec.full_scale)
    assert listing.code == "".join(lines)
    assert listing.first_line == first
    assert listing.path == "eigprec/runtime.py"
    assert listing.qualname == "eigprec.runtime.full_scale"


def test_class_and_method():
    assert show_source(RuntimeInfo).code.lstrip().startswith("@dataclass")
    assert "def tf32_label" in show_source(RuntimeInfo).code
    assert show_source(RuntimeInfo._repr_html_).code.lstrip().startswith("def _repr_html_")


def test_html_is_highlighted_and_self_contained():
    html = show_source(eigprec.full_scale)._repr_html_()
    assert "style=" in html and "<span" in html  # inline-styled tokens, no stylesheet
    assert "eigprec/runtime.py" in html
    assert 'class="' in html


def test_text_has_header_with_line_range():
    listing = show_source(eigprec.full_scale)
    last = listing.first_line + listing.code.count("\n") - 1
    assert str(listing).splitlines()[0] == (
        f"# eigprec.runtime.full_scale — eigprec/runtime.py, lines {listing.first_line}–{last}"
    )


@pytest.mark.parametrize("bad", [len, 3, "text", eigprec.describe_runtime()])
def test_rejects_objects_without_python_source(bad):
    with pytest.raises(TypeError, match=r"show_source|source"):
        show_source(bad)
