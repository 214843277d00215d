"""The degeneracy chapter's "What to set" box is read in a minute (issue 46 item 7)."""

from __future__ import annotations

import re

from .conftest import ROOT

MAX_WORDS = 250


def box_words(text: str) -> int:
    """Words in a MyST admonition's body as a reader sees them: a glued value, a link role or
    an inline formula counts as one word, a code span as the words it shows."""
    text = re.sub(r"^:\w+:.*$", "", text, flags=re.M)  # directive options (:class: tip)
    text = re.sub(r"\{(glue:\w+|glue|ref|doc|numref|term|py:\w+)\}`[^`]*`", " X ", text)
    text = re.sub(r"\$[^$]*\$", " X ", text)
    text = text.replace("`", " ").replace("**", " ")
    return len([w for w in re.split(r"\s+", text) if re.search(r"\w", w)])


def _box(page: str, title: str) -> str:
    text = (ROOT / "book" / page).read_text(encoding="utf-8")
    match = re.search(rf"^:::\{{admonition\}} {re.escape(title)}\n(.*?)^:::$", text, re.S | re.M)
    assert match, f"no '{title}' box in {page}"
    return match.group(1)


def test_the_what_to_set_box_is_at_most_250_words():
    words = box_words(_box("degeneracy.md", "What to set"))
    assert 0 < words <= MAX_WORDS, f"the box has {words} words"


def test_the_word_count_reads_roles_and_formulas_as_a_reader_does():
    assert box_words(":class: tip\n**Clip** at {glue:text}`x:.2f`× ($10^{-4}$), `'highest'`.") == 5
