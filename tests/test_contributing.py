"""The contributor's documents stay short and true of the repository (issue 44 item 6).

CONTRIBUTING.md is what a contributor reads first: the commands, the layout, adding a chapter,
how the build stays honest. It had grown to 460 lines with a dated timing history and lines
that the layout move had made false (a folder "that does not exist" while it held seven
records). So: at most 200 lines; every path and `make` target it names exists; the timing
history lives in benchmarks/README.md, whose table lists every benchmark script.
"""

import re

import pytest

from .conftest import ROOT

DOCS = ["CONTRIBUTING.md", "README.md", "benchmarks/README.md"]
MAX_CONTRIBUTING_LINES = 200
#: Paths a document names before they exist, each with why.
NOT_YET: dict[str, str] = {}
#: Top-level names a repository path in backticks starts with.
TOP = {p.name for p in ROOT.iterdir()} - {".git", ".venv", "_build"}


def _paths(text: str) -> list[str]:
    """Repository paths in backticks or links: `tools/x.py`, (benchmarks/README.md)."""
    found = []
    for token in re.findall(r"`([^`\s]+)`|\]\(([^)#\s]+)\)", text):
        path = next(t for t in token if t)
        if re.search(r"[<>*$]|^https?:|\.\.\.|…", path) or path.split("/")[0] not in TOP:
            continue  # a placeholder (<page>.md, *_gpu.json), a URL, or not a path
        found.append(path)
    return found


def test_contributing_is_at_most_200_lines():
    lines = (ROOT / "CONTRIBUTING.md").read_text().splitlines()
    assert len(lines) <= MAX_CONTRIBUTING_LINES, (
        f"CONTRIBUTING.md has {len(lines)} lines; a newcomer's file stays under "
        f"{MAX_CONTRIBUTING_LINES}: move history to benchmarks/README.md or CHANGELOG.md"
    )


@pytest.mark.parametrize("doc", DOCS)
def test_every_path_a_document_names_exists(doc):
    paths = _paths((ROOT / doc).read_text())
    assert len(paths) >= 3, f"{doc}: the path finder found {paths}"
    missing = [p for p in paths if p not in NOT_YET and not (ROOT / p).exists()]
    assert not missing, f"{doc} names paths that do not exist: {missing}"


def _layout() -> dict[str, list[str]]:
    """CONTRIBUTING.md's layout tree: each top-level entry with the entries under it."""
    text = (ROOT / "CONTRIBUTING.md").read_text()
    block = text.split("\n## Layout\n", 1)[1].split("```", 2)[1]
    tree: dict[str, list[str]] = {}
    for line in block.splitlines()[1:]:
        name = line.strip().split("  ")[0].removesuffix(" …").strip()
        if not name or line.startswith("   "):
            continue  # a blank line, or a description running on
        if line.startswith("  "):
            top = list(tree)[-1]
            alternatives = re.fullmatch(r"(.*)<([\w|]+)>(.*)", name)
            parts = alternatives.group(2).split("|") if alternatives else [None]
            if alternatives and alternatives.group(1).endswith("/"):
                tree[top].append(top + alternatives.group(1))  # chapters/ of chapters/<a|b>/
            for part in parts:
                child = name if part is None else alternatives.expand(rf"\g<1>{part}\g<3>")
                tree[top].append(top + child)
        elif line[:1] not in (" ", ""):
            for entry in name.split(", "):
                tree[entry] = []
    return tree


def test_the_layout_names_paths_that_exist_and_every_subpackage():
    tree = _layout()
    assert "src/eigprec/" in tree and "bookpkg/eigprec_book/" in tree, list(tree)
    named = [*tree, *(child for children in tree.values() for child in children)]
    missing = [p for p in named if not list(ROOT.glob(p.rstrip("/")))]
    assert not missing, f"CONTRIBUTING.md's layout names what does not exist: {missing}"
    for package in ("src/eigprec", "bookpkg/eigprec_book"):
        subpackages = {
            f"{package}/{p.parent.name}/" for p in (ROOT / package).glob("*/__init__.py")
        }
        assert len(subpackages) >= 3
        unnamed = sorted(subpackages - set(tree[package + "/"]))
        assert not unnamed, f"CONTRIBUTING.md's layout omits {unnamed}"


def test_the_path_finder_skips_placeholders_urls_and_words():
    text = (
        "`book/<page>.md` `records/*_gpu.json` [x](https://a.b/c) `-W -n` `make test` "
        "`tools/robustness.py` [README](README.md) `src/eigprec/nope.py`"
    )
    assert _paths(text) == ["tools/robustness.py", "README.md", "src/eigprec/nope.py"]
    assert not (ROOT / "src/eigprec/nope.py").exists()  # what the test above would catch


@pytest.mark.parametrize("doc", DOCS)
def test_every_make_target_a_document_names_exists(doc):
    makefile = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([\w-]+):", makefile, re.M))
    named = set(re.findall(r"`make ([a-z][\w-]*)", (ROOT / doc).read_text()))
    assert not named - targets, f"{doc} names make targets the Makefile lacks: {named - targets}"


def test_contributing_names_every_target_of_make_help():
    text = (ROOT / "CONTRIBUTING.md").read_text()
    makefile = (ROOT / "Makefile").read_text()
    phony = set()
    for line in re.findall(r"^\.PHONY:((?:.*\\\n)*.*)$", makefile, re.M):
        phony |= set(line.replace("\\\n", " ").split())
    internal = {"cache-key", "strict-book", "help"}  # steps of `make test`/`make book`
    assert len(phony) >= 10
    unnamed = sorted(t for t in phony - internal if f"`make {t}" not in text)
    assert not unnamed, f"CONTRIBUTING.md does not say what these targets do: {unnamed}"


def test_benchmarks_readme_lists_every_script_and_keeps_the_timing_history():
    text = (ROOT / "benchmarks" / "README.md").read_text()
    scripts = sorted(p.name for p in (ROOT / "benchmarks").glob("*.py"))
    listed = sorted(set(re.findall(r"^\| `([\w.]+\.py)` \|", text, re.M)))
    assert listed == scripts
    history = text.split("\n## Timing history\n", 1)
    assert len(history) == 2, "no '## Timing history' section"
    # Dated measurements, each with the figures measured that day.
    assert len(re.findall(r"\b(?:2[4-8] November|2026-11-2\d)\b", history[1])) >= 4
    assert "make test" in history[1] and re.search(r"\d+ s\b", history[1])
    contributing = (ROOT / "CONTRIBUTING.md").read_text()
    assert not re.search(r"\b\d+ s for the unit suite\b", contributing), "history moved"


def test_the_docs_name_no_retired_variable_or_module():
    # EIGPREC_FULL/EIGPREC_QUICK became EIGPREC_SCALE; eigprec.book, eigprec.chapters and
    # eigprec.bench became the eigprec_book package (issue 44).
    retired = r"EIGPREC_FULL|EIGPREC_QUICK|eigprec[./](?:book|chapters|bench)\b"
    for doc in DOCS:
        found = re.findall(retired, (ROOT / doc).read_text())
        assert not found, f"{doc}: {found}"


def test_not_yet_lists_only_paths_still_missing():
    # Once the GPU tooling lands in tools/gpu/, its entries go.
    arrived = [p for p in NOT_YET if (ROOT / p).exists()]
    assert not arrived, f"remove from NOT_YET, they exist now: {arrived}"
