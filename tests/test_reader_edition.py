"""What every chapter page owes a new reader (issue 23, the reader's edition).

Checked on the committed sources: the page opens with its title, question and a
key-results box, then the collapsed provenance box; at most 3,500 words of prose; every
figure has alt text, one numbered caption and a {numref} to it; two to four exercises per
chapter with solutions; glossary terms and at least three links into the API page.
"""

import re
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from .conftest import ROOT, read_page

sys.path.insert(0, str(ROOT / "tools"))
from book_pages import page_paths

PAGES = page_paths(ROOT / "book")
MAX_PROSE_WORDS = 3500

ROLE = re.compile(r"\{[\w:.-]+\}`[^`]*`")
FENCE = re.compile(r"^(```+|:::+)\s*(\S*)", re.M)


def _src(cell: dict) -> str:
    s = cell["source"]
    return "".join(s) if isinstance(s, list) else s


def _tags(cell: dict) -> list[str]:
    return cell.get("metadata", {}).get("tags", [])


def _markdown(nb: dict) -> str:
    return "\n\n".join(_src(c) for c in nb["cells"] if c["cell_type"] == "markdown")


def prose_words(markdown: str) -> int:
    """Words a reader reads: code fences, directive options, targets, comments and math
    removed; a role (a glued value, a citation, a link) counts as one word."""
    text = re.sub(r"<!--.*?-->", " ", markdown, flags=re.S)
    text = re.sub(r"```+[^{\n]*\n.*?```+", " ", text, flags=re.S)  # code, not directives
    text = re.sub(r"\$\$.*?\$\$", " ", text, flags=re.S)
    text = re.sub(r"\$[^$\n]+\$", " x ", text)
    text = ROLE.sub(" x ", text)
    text = re.sub(r"^\s*:[\w-]+:.*$", " ", text, flags=re.M)  # directive options
    text = re.sub(r"^\([\w-]+\)=\s*$", " ", text, flags=re.M)  # (label)= targets
    text = re.sub(r"^(```+|:::+)\s*\{[\w:-]+\}", " ", text, flags=re.M)
    return len(re.findall(r"[A-Za-z0-9][\w'’.-]*", text))


def _chapter(path: Path) -> str:
    return path.stem.split("_")[0]


@pytest.fixture(scope="module", params=PAGES, ids=lambda p: p.name)
def page(request):
    return request.param, read_page(request.param)


def test_prose_counter_counts_words_not_syntax():
    md = (
        "# Title\n\nOne two {glue:text}`x:.2f` three.\n\n```python\nnot = counted\n```\n\n"
        ":::{admonition} Key results\n:class: tip\nfour $a+b$ five\n:::\n"
    )
    # Title, One, two, <glue>, three, Key, results, four, <math>, five
    assert prose_words(md) == 10


def test_page_opens_with_title_question_key_results_then_provenance(page):
    path, nb = page
    cells = nb["cells"]
    first_section = next(
        i
        for i, c in enumerate(cells)
        if c["cell_type"] == "markdown" and re.search(r"^##\s", _src(c), re.M)
    )
    head = cells[:first_section]
    title = next((i for i, c in enumerate(head) if c["cell_type"] == "markdown"), None)
    assert title is not None, f"{path.name}: no title before the first section"
    title_src = _src(head[title]).lstrip()
    assert title_src.startswith("# "), f"{path.name}: the first Markdown cell is the title"
    question = title_src.split("\n", 1)[1] if "\n" in title_src else ""
    assert prose_words(question) >= 15, f"{path.name}: two or three sentences of question"
    for c in head[:title]:
        assert c["cell_type"] != "code" or "remove-cell" in _tags(c), (
            f"{path.name}: a visible code cell comes before the title"
        )
    prov = [i for i, c in enumerate(head) if re.search(r"^provenance\(\)", _src(c), re.M)]
    assert len(prov) == 1, f"{path.name}: one provenance cell before the first section"
    box = "\n".join(_src(c) for c in head[title : prov[0]] if c["cell_type"] == "markdown")
    assert re.search(r"\{admonition\}\s*(Key results|What you will learn)", box), (
        f"{path.name}: a key-results box between the question and the provenance box"
    )
    assert "{glue" in box, f"{path.name}: the key results carry the headline numbers, glued"
    assert re.search(r"\{(ref|numref|doc)\}`|\]\(#", box), (
        f"{path.name}: the key results link to the sections that establish them"
    )
    for c in head[title + 1 : prov[0]]:
        assert c["cell_type"] == "markdown" or "remove-cell" in _tags(c), (
            f"{path.name}: only the key results (and hidden cells) before the provenance box"
        )


def test_at_most_3500_words_of_prose(page):
    path, nb = page
    words = prose_words(_markdown(nb))
    assert words <= MAX_PROSE_WORDS, f"{path.name}: {words} words of prose"


def test_sections_are_numbered_by_the_toc_not_by_hand(page):
    path, nb = page
    hand = re.findall(r"^#{2,}\s+\d+(?:\.\d+)*\.?\s.*$", _markdown(nb), re.M)
    assert not hand, f"{path.name}: the toc numbers sections; drop {hand[:3]}"


def test_every_figure_has_alt_text_one_caption_and_a_numref(page):
    path, nb = page
    md = _markdown(nb)
    assert not re.search(r"^\s*\*?\s*Fig(ure)?\.?\s*\d+[.:]", md, re.M), (
        f"{path.name}: hand-written 'Figure N.' caption; use the cell's numbered caption"
    )
    for i, c in enumerate(nb["cells"]):
        meta = c.get("metadata", {}).get("mystnb", {})
        if "figure" not in meta:
            continue
        fig = meta["figure"]
        assert fig.get("caption") and fig.get("name"), f"{path.name} cell {i}: caption, name"
        alt = meta.get("image", {}).get("alt", "")
        assert len(alt.split()) >= 6 and not re.search(r"\.(png|svg|jpe?g)$", alt), (
            f"{path.name} cell {i}: alt text that says what the figure shows"
        )
        assert f"{{numref}}`{fig['name']}`" in md or re.search(
            r"\{numref\}`[^`]*<" + re.escape(fig["name"]) + ">`", md
        ), f"{path.name}: no {{numref}} to {fig['name']}"


def test_every_page_links_the_glossary_and_the_api(page):
    path, nb = page
    md = _markdown(nb)
    assert re.search(r"\{term\}`", md), f"{path.name}: link a term to the glossary"
    api = re.findall(r"\{py:(func|class|meth|mod|data|attr|obj)\}`", md)
    assert len(api) >= 3, f"{path.name}: {len(api)} links into the API page, at least 3"


def _exercises_and_solutions(md: str) -> tuple[set[str], set[str]]:
    """Exercise labels (their :label: option) and the labels solutions answer."""
    exercises, solutions = set(), set()
    for m in re.finditer(
        r"^(?:```+|:::+)\{(exercise|exercise-start)\}[^\n]*\n((?::[\w-]+:.*\n)*)", md, re.M
    ):
        label = re.search(r"^:label:\s*(\S+)", m.group(2), re.M)
        exercises.add(label.group(1) if label else f"<unlabelled at {m.start()}>")
    for m in re.finditer(r"^(?:```+|:::+)\{(?:solution|solution-start)\}\s*(\S+)", md, re.M):
        solutions.add(m.group(1))
    return exercises, solutions


def test_two_to_four_exercises_per_chapter_each_with_a_solution():
    exercises, solutions = defaultdict(set), defaultdict(set)
    for path in PAGES:
        ex, sol = _exercises_and_solutions(_markdown(read_page(path)))
        exercises[_chapter(path)] |= ex
        solutions[_chapter(path)] |= sol
    for ch in sorted({_chapter(p) for p in PAGES}):
        assert 2 <= len(exercises[ch]) <= 4, f"{ch}: {len(exercises[ch])} exercises"
        missing = exercises[ch] - solutions[ch]
        assert not missing, f"{ch}: no solution for {sorted(missing)}"
    assert sum(len(v) for v in exercises.values()) >= 6


def test_exercise_parser_reads_labels_and_solutions():
    md = (
        ":::{exercise} Your own model\n:label: ex-own\n\nRun it.\n:::\n\n"
        "```{exercise-start} Second\n:label: ex-two\n```\ntext\n```{exercise-end}\n```\n"
        "::::{solution} ex-own\n:class: dropdown\nx\n::::\n"
        "```{solution-start} ex-two\n:class: dropdown\n```\n"
    )
    assert _exercises_and_solutions(md) == ({"ex-own", "ex-two"}, {"ex-own", "ex-two"})
