"""Bibliography labels that read like the citations in the text (issue 23.10).

sphinxcontrib-bibtex's default list style (pybtex's ``alpha``) labels an entry
``[NVIDIACorporation24a]`` while the ``author_year`` citations in the text read
``[Kharya, 2020]``, and two citations of different works by one author in one year read
alike (``[PyTorch contributors, 2026]`` twice). Here one label serves both: ``Author,
Year`` with ``a``, ``b``, ... after the year where two cited works would share it, as
author-year styles do. The list uses it as its label (``bibtex_default_style:
eigprec``), a parenthetical citation shows it (``[Kharya, 2020]``), and a textual one
splits it (``Kharya [2020]``), so the text and the list always agree.

Authors as the label names them: one author's last name; two joined by "and"; three or
more as the first "et al."; with no author the editor; with neither the title.
"""

from __future__ import annotations

import string
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import pybtex.plugin
from pybtex.richtext import Text
from pybtex.style.formatting.plain import Style as PlainStyle
from pybtex.style.labels import BaseLabelStyle
from pybtex.style.sorting import BaseSortingStyle
from sphinxcontrib.bibtex.plugin import register_plugin
from sphinxcontrib.bibtex.style.referencing.author_year import AuthorYearReferenceStyle
from sphinxcontrib.bibtex.style.referencing.basic_author_year import (
    BasicAuthorYearParentheticalReferenceStyle,
    BasicAuthorYearTextualReferenceStyle,
)
from sphinxcontrib.bibtex.style.template import (
    entry_label,
    join,
    join2,
    node,
    post_text,
    pre_text,
    reference,
)

#: The name under which the list style and the citation style are registered.
NAME = "eigprec"

__all__ = [
    "NAME",
    "AuthorYearLabelStyle",
    "AuthorYearSortingStyle",
    "ReferenceStyle",
    "Style",
    "register",
    "who",
]


def _plain(latex: str) -> str:
    return Text.from_latex(latex).render_as("text")


def who(entry: Any) -> str:
    """The authors as a label names them (see the module's docstring)."""
    persons = entry.persons.get("author") or entry.persons.get("editor") or []
    lasts = [_plain(" ".join(p.prelast_names + p.last_names)) for p in persons]
    if not lasts:
        return _plain(entry.fields.get("title", entry.key))
    if len(lasts) == 1:
        return lasts[0]
    if len(lasts) == 2:
        return f"{lasts[0]} and {lasts[1]}"
    return f"{lasts[0]} et al."


class AuthorYearLabelStyle(BaseLabelStyle):
    """``Author, Year``, with ``a``, ``b``, ... where cited entries would share a label."""

    def format_labels(self, sorted_entries: Iterable[Any]) -> Iterator[str]:
        entries = list(sorted_entries)
        bases = [f"{who(e)}, {_plain(e.fields.get('year', 'n.d.'))}" for e in entries]
        counts = Counter(bases)
        seen: Counter[str] = Counter()
        for base in bases:
            if counts[base] == 1:
                yield base
            else:
                yield base + string.ascii_lowercase[seen[base]]
                seen[base] += 1


class AuthorYearSortingStyle(BaseSortingStyle):
    """Sorted as the labels read (authors, year), then by title: ``a``, ``b`` follow titles."""

    def sorting_key(self, entry: Any) -> tuple[str, str, str]:
        title = _plain(entry.fields.get("title", "")).lower()
        return who(entry).lower(), _plain(entry.fields.get("year", "")), title


class Style(PlainStyle):
    """pybtex's ``plain`` list entries, sorted and labelled by author and year."""

    default_label_style = AuthorYearLabelStyle
    default_sorting_style = AuthorYearSortingStyle


@node
def _label_author(children: Any, data: dict) -> Text:
    assert not children
    return Text(data["formatted_entry"].label.rsplit(", ", 1)[0])


@node
def _label_year(children: Any, data: dict) -> Text:
    assert not children
    return Text(data["formatted_entry"].label.rsplit(", ", 1)[1])


@dataclass
class _Parenthetical(BasicAuthorYearParentheticalReferenceStyle):
    def inner(self, role_name: str) -> Any:
        return join2(sep1=self.pre_text_sep, sep2=self.post_text_sep)[
            pre_text, reference[entry_label], post_text
        ]


@dataclass
class _Textual(BasicAuthorYearTextualReferenceStyle):
    def inner(self, role_name: str) -> Any:
        return join(sep=self.text_reference_sep)[
            _label_author,
            join[
                self.bracket.left,
                join2(sep1=self.pre_text_sep, sep2=self.post_text_sep)[
                    pre_text, reference[_label_year], post_text
                ],
                self.bracket.right,
            ],
        ]


@dataclass
class ReferenceStyle(AuthorYearReferenceStyle):
    """sphinxcontrib-bibtex's ``author_year``, its ``p`` and ``t`` roles read from the label."""

    def __post_init__(self) -> None:
        super().__post_init__()
        replaced = [
            _Parenthetical(bracket=self.bracket_parenthetical, person=self.person),
            _Textual(bracket=self.bracket_textual, person=self.person),
        ]
        self.styles[:2] = replaced
        for style in replaced:
            self.role_style.update((role, style) for role in style.role_names())


def register() -> None:
    """Make ``eigprec`` a list style (pybtex) and a citation style (sphinxcontrib-bibtex)."""
    pybtex.plugin.register_plugin("pybtex.style.formatting", NAME, Style, force=True)
    register_plugin("sphinxcontrib.bibtex.style.referencing", NAME, ReferenceStyle, force=True)
