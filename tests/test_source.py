"""show_source: the package's real code, with its location, in HTML and text."""

import inspect
import re

import pytest
from eigprec_book.helpers import show_source

import eigprec
from eigprec.runtime import RuntimeInfo


def test_function_source_is_the_real_source():
    listing = show_source(eigprec.describe_runtime)
    lines, first = inspect.getsourcelines(eigprec.describe_runtime)
    assert listing.code == "".join(lines)
    assert listing.first_line == first
    assert listing.path == "eigprec/runtime.py"
    assert listing.qualname == "eigprec.runtime.describe_runtime"


def test_class_and_method():
    assert show_source(RuntimeInfo).code.lstrip().startswith("@dataclass")
    assert "def tf32_label" in show_source(RuntimeInfo).code
    assert show_source(RuntimeInfo._repr_html_).code.lstrip().startswith("def _repr_html_")


def test_html_is_highlighted_with_the_themes_pygments_classes():
    html = show_source(eigprec.describe_runtime)._repr_html_()
    assert "eigprec/runtime.py" in html
    # Tokens carry Pygments' short CSS classes inside a div.highlight, which the book
    # theme's own Pygments stylesheet colours in its light and its dark theme ...
    assert '<div class="highlight"><pre>' in html
    assert '<span class="k">def</span>' in html and '<span class="nf">' in html
    # ... so no colour or background is written inline (no style fixed for one theme)
    assert re.search(r"style=\"[^\"]*(color|background)", html) is None


def test_text_has_header_with_line_range():
    listing = show_source(eigprec.describe_runtime)
    last = listing.first_line + listing.code.count("\n") - 1
    assert str(listing).splitlines()[0] == (
        f"# eigprec.runtime.describe_runtime — eigprec/runtime.py, "
        f"lines {listing.first_line}–{last}"
    )


@pytest.mark.parametrize("bad", [len, 3, "text", eigprec.describe_runtime()])
def test_rejects_objects_without_python_source(bad):
    with pytest.raises(TypeError, match=r"show_source|source"):
        show_source(bad)


def _marked(x):
    y = x + 1
    # [show:core]
    z = y * 2
    w = z - 3
    # [/show:core]
    return w


def test_a_marked_part_shows_only_its_lines_with_their_numbers():
    import inspect

    whole = show_source(_marked)
    assert "[show:" not in whole.code and "z = y * 2" in whole.code
    part = show_source(_marked, part="core")
    assert part.code == "z = y * 2\nw = z - 3\n"
    first = inspect.getsourcelines(_marked)[1]
    assert part.first_line == first + 3
    assert part.header.endswith(f"lines {first + 3}–{first + 4}")


def test_an_unknown_part_or_a_bad_part_name_is_refused():
    with pytest.raises(ValueError, match=r"no part marked '# \[show:nope\]'"):
        show_source(_marked, part="nope")
    with pytest.raises(TypeError, match="part must be a string"):
        show_source(_marked, part=3)
