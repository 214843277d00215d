"""LICENSE, CITATION.cff, CHANGELOG.md, README.md, CONTRIBUTING.md, pyproject.toml and
_config.yml agree: one version, one licence statement, one repository and one published
address. The README serves a newcomer; maintainer detail lives in CONTRIBUTING.md.
"""

import re
import sys
import tomllib

import pytest
import yaml

from .conftest import ROOT

sys.path.insert(0, str(ROOT / "tools"))
from book_pages import page_paths


@pytest.fixture(scope="module")
def project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


@pytest.fixture(scope="module")
def citation() -> dict:
    return yaml.safe_load((ROOT / "CITATION.cff").read_text())


@pytest.fixture(scope="module")
def readme() -> str:
    return (ROOT / "README.md").read_text()


@pytest.fixture(scope="module")
def contributing() -> str:
    return (ROOT / "CONTRIBUTING.md").read_text()


def test_code_licence_is_mit_as_an_spdx_expression(project):
    assert project["license"] == "MIT"  # PEP 639: a string, not the deprecated table
    assert project["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("MIT License\n")
    assert "Permission is hereby granted, free of charge" in text
    build = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]
    (setuptools,) = [r for r in build["requires"] if r.startswith("setuptools")]
    minimum = tuple(int(x) for x in re.fullmatch(r"setuptools>=([\d.]+)", setuptools)[1].split("."))
    assert minimum >= (77,), "license-files and an SPDX license need setuptools 77"


def test_citation_agrees_with_the_package_and_the_book(project, citation, book_config):
    assert citation["cff-version"] == "1.2.0"
    assert citation["version"] == project["version"]
    assert citation["license"] == ["MIT", "CC-BY-4.0"]
    assert citation["repository-code"] == book_config["repository"]["url"]
    assert citation["url"] == book_config["html"]["baseurl"]
    assert citation["title"] == book_config["title"]
    assert [a["name"] for a in citation["authors"]] == [book_config["author"]]


def test_both_packages_carry_one_version(project):
    # A release sets the version in each of these (CONTRIBUTING.md, "Releases").
    book = tomllib.loads((ROOT / "bookpkg" / "pyproject.toml").read_text())["project"]
    init = (ROOT / "src" / "eigprec" / "__init__.py").read_text()
    (in_code,) = re.findall(r'^__version__ = "([^"]+)"$', init, re.M)
    assert book["version"] == in_code == project["version"]


def test_changelog_has_the_current_version(project):
    text = (ROOT / "CHANGELOG.md").read_text()
    headings = re.findall(r"^## \[(\d+\.\d+\.\d+)\] - (.+)$", text, re.M)
    assert headings, "no `## [X.Y.Z] - date` heading"
    assert headings[0][0] == project["version"], "newest heading must be pyproject's version"
    date = headings[0][1]
    assert date == "unreleased" or re.fullmatch(r"\d{4}-\d{2}-\d{2}", date), date


def test_readme_states_both_licences_and_the_published_site(readme, book_config):
    assert "[MIT licence](LICENSE)" in readme
    assert "CC BY 4.0" in readme and "https://creativecommons.org/licenses/by/4.0/" in readme
    assert f"**{book_config['html']['baseurl']}**" in readme
    assert "https://jupyterbook.org/v1/" in readme


def test_readme_has_ci_site_and_one_colab_badge_per_chapter(readme, book_config):
    repo = book_config["repository"]["url"]
    assert f"[![ci]({repo}/actions/workflows/ci.yml/badge.svg)]" in readme
    assert f"({repo}/actions/workflows/book.yml/badge.svg)]({book_config['html']['baseurl']})" in (
        readme
    )
    org_repo = repo.removeprefix("https://github.com/")
    colab = re.findall(
        rf"\(https://colab\.research\.google\.com/github/{re.escape(org_repo)}/blob/"
        rf"{book_config['repository']['branch']}/(book/[\w-]+\.ipynb)\)",
        readme,
    )
    toc = (ROOT / "_toc.yml").read_text()
    # The badges open each chapter's reader's notebook (book/<page>.ipynb on the
    # notebooks branch), one per chapter page (book/<page>.md).
    chapters = sorted(f"book/{p.stem}.ipynb" for p in page_paths(ROOT / "book"))
    assert sorted(colab) == chapters
    for chapter in chapters:
        assert chapter.removesuffix(".ipynb") in toc


def test_readme_names_the_two_commands_and_contributing_the_rest(readme, contributing):
    makefile = (ROOT / "Makefile").read_text()
    for target in ("book", "test"):
        assert f"make {target}" in readme, target
    for target in ("book", "test", "env", "linkcheck", "publish"):
        assert f"make {target}" in contributing, target
        assert re.search(rf"^{target}:", makefile, re.M), target
    assert "TORCH_INDEX" in contributing
    assert "[CONTRIBUTING.md](CONTRIBUTING.md)" in readme


def test_readme_first_screen_serves_a_newcomer(readme, contributing, book_config):
    # What the book teaches, where to read it, the two commands and how to reuse the
    # package come before the pointer to the maintainers' file, in a page one can take in.
    first = readme.split("## Contributing", 1)[0]
    assert len(readme.splitlines()) <= 120
    assert book_config["html"]["baseurl"] in first
    assert "make book" in first and "make test" in first
    assert 'pip install "eigprec @ git+' in first
    for maintainer_detail in ("GPU_RUNNER", "gpu_record.sh", "## Releases"):
        assert maintainer_detail not in readme
        assert maintainer_detail in contributing
