"""tools/page_axe.py: the vendored axe-core is the published file, and the impacts
that fail a page are the documented ones (the browser runs are in test_check_browser)."""

import base64
import hashlib
import shutil
import sys

import pytest

from .conftest import ROOT

sys.path.insert(0, str(ROOT / "tools"))
import page_axe

# axe-core's own published subresource-integrity hash of axe.min.js 4.14.1
# (sri-history.json in the npm package), written here independently of page_axe.
PUBLISHED = "sha256-KTSJmUUM3yhJqOcLeRL8LahahJ2jnA0NU5T1HUqe2Vw="


def test_vendored_axe_is_the_published_file_with_its_licence():
    data = (page_axe.AXE_DIR / "axe.min.js").read_bytes()
    assert "sha256-" + base64.b64encode(hashlib.sha256(data).digest()).decode() == PUBLISHED
    assert data.startswith(b"/*! axe v4.14.1")
    assert "Mozilla Public License" in (page_axe.AXE_DIR / "LICENSE").read_text()
    assert page_axe.axe_source().startswith("/*! axe v4.14.1")


def test_tampered_axe_is_refused(tmp_path, monkeypatch):
    shutil.copytree(page_axe.AXE_DIR, tmp_path / "axe-core")
    script = tmp_path / "axe-core" / "axe.min.js"
    script.write_bytes(script.read_bytes() + b"\n// changed")
    monkeypatch.setattr(page_axe, "AXE_DIR", tmp_path / "axe-core")
    page_axe.axe_source.cache_clear()
    try:
        with pytest.raises(RuntimeError, match=r"is not axe-core 4\.14\.1"):
            page_axe.axe_source()
        script.unlink()
        page_axe.axe_source.cache_clear()
        with pytest.raises(RuntimeError, match="axe-core is missing"):
            page_axe.axe_source()
    finally:
        page_axe.axe_source.cache_clear()


def _v(rule, impact, dark=False):
    return {
        "id": rule,
        "impact": impact,
        "help": f"{rule} help",
        "nodes": 2,
        "targets": ["p.x", "p.y"],
        "summary": "",
        "dark": dark,
    }


def test_serious_and_critical_fail_by_default():
    found = [
        _v("region", "moderate"),
        _v("image-alt", "critical"),
        _v("color-contrast", "serious", dark=True),
        _v("x", "minor"),
    ]
    assert page_axe.axe_problems(found) == [
        "accessibility (critical, image-alt): image-alt help; 2 elements: p.x",
        "accessibility (serious, color-contrast) in the dark theme: color-contrast help; "
        "2 elements: p.x",
    ]
    assert len(page_axe.axe_problems(found, "minor")) == 4
    assert page_axe.axe_problems(found, "critical") == page_axe.axe_problems(found)[:1]
    assert page_axe.axe_summary(found).startswith(
        "axe 4.14.1: rules violated critical 1 serious 1 moderate 1 minor 1 ["
    )


def test_bad_threshold_is_refused():
    with pytest.raises(ValueError, match="failing_from must be one of"):
        page_axe.axe_problems([], "severe")
