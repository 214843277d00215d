"""tools/gpu/gpu_wheels.py: what the GPU machine gets carried, pinned, and within 64 MiB."""

from __future__ import annotations

import hashlib
import json
import socket
import sys
import zipfile

import pytest

from .conftest import ROOT

sys.path.insert(0, str(ROOT / "tools" / "gpu"))
import gpu_wheels


def _item(name: str, version: str, *requires: str) -> dict:
    return {"metadata": {"name": name, "version": version, "requires_dist": list(requires)}}


def test_parse_requirements_reads_the_repository_pins():
    pins = gpu_wheels.parse_requirements((ROOT / "requirements.txt").read_text())
    for name in ("nbclient", "ipykernel", "nbformat", "jupyter-client", "pyyaml", "tqdm"):
        assert name in pins
    for name in gpu_wheels.NO_DEPS:  # carried without resolution, so they must be pinned
        assert name in pins
    assert pins["torch"] == "2.13.*"
    with pytest.raises(ValueError, match="line 2"):
        gpu_wheels.parse_requirements("a==1\nb>=2\n")


def test_select_leaves_out_what_the_machine_has():
    report = {
        "install": [
            _item(
                "pytest",
                "9.2.0",
                "packaging>=20",
                "pygments>=2.7",
                'colorama; sys_platform == "win32"',
            ),
            _item("packaging", "26.3"),
            _item("Pygments", "2.21.0"),
            _item("nbclient", "0.11.0", "jupyter-client>=6", "packaging"),
            _item("jupyter_client", "8.10.0", "pyzmq>=25", 'pytest; extra == "test"'),
            _item("pyzmq", "27.3.0"),
            _item("PyYAML", "6.0.3"),
            _item("tqdm", "4.70.1"),
            _item("numpy", "2.4.6"),
        ]
    }
    pins = {
        "nbclient": "0.11.0",
        "jupyter-client": "8.10.0",
        "pygments": "2.21.0",
        "pyyaml": "6.0.3",
        "tqdm": "4.70.1",
        "emerging-optimizers": "0.3.0",
        "absl-py": "2.5.1",
        # MyST-NB's reader and what it imports, carried without their Sphinx dependencies.
        "myst-nb": "1.4.0",
        "myst-parser": "3.0.1",
        "markdown-it-py": "3.0.0",
        "mdit-py-plugins": "0.7.0",
        "mdurl": "0.1.2",
        "docutils": "0.21.2",
    }
    chosen = gpu_wheels.select(report, pins)
    carried = {p["name"]: p["version"] for p in chosen["carry"]}
    # packaging comes with pytest; Pygments is a root, so carried all the same.
    assert "packaging" not in carried and "numpy" not in carried and "pytest" not in carried
    assert carried["pygments"] == "2.21.0" and carried["pyyaml"] == "6.0.3"
    assert carried["emerging-optimizers"] == "0.3.0" and carried["absl-py"] == "2.5.1"
    assert carried["myst-nb"] == "1.4.0" and "sphinx" not in carried
    assert "colorama" not in carried  # Windows-only marker
    assert chosen["unpinned"] == ["pyzmq"]  # needed, not in requirements.txt
    assert "packaging" in chosen["left_out"]
    with pytest.raises(ValueError, match="must pin absl-py"):
        gpu_wheels.select(report, {k: v for k, v in pins.items() if k != "absl-py"})


def test_check_size_names_the_largest_files(tmp_path):
    small, big = tmp_path / "small.whl", tmp_path / "big.whl"
    small.write_bytes(b"x" * 1000)
    big.write_bytes(b"x" * 300_000)
    assert gpu_wheels.check_size([small, big], limit_mib=1.0) == 301_000
    with pytest.raises(ValueError, match=r"over the 0.25 MiB.*big.whl"):
        gpu_wheels.check_size([small, big], limit_mib=0.25)


def _pypi_reachable() -> bool:
    try:
        with socket.create_connection(("pypi.org", 443), timeout=5):
            return True
    except OSError:
        return False


def test_bundle_from_pypi_fits_and_is_complete(tmp_path):
    if not _pypi_reachable():
        pytest.skip("PyPI is not reachable from this machine: the bundle cannot be downloaded")
    out = tmp_path / "gpu-wheels"
    assert gpu_wheels.main(["--out", str(out)]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["total_bytes"] <= 64 * 2**20
    carried = {p["name"] for p in manifest["packages"]}
    needed = {"nbclient", "nbformat", "ipykernel", "jupyter-client", "pyyaml", "tqdm"}
    assert needed | {"pygments", "emerging-optimizers", "absl-py", "pyzmq", "myst-nb"} <= carried
    assert not carried & {"torch", "numpy", "scipy", "matplotlib", "pytest", "hypothesis"}
    pins = gpu_wheels.parse_requirements((ROOT / "requirements.txt").read_text())
    for p in manifest["packages"]:
        assert pins[p["name"]] == p["version"]
        data = (out / p["file"]).read_bytes()
        assert hashlib.sha256(data).hexdigest() == p["sha256"] and len(data) == p["bytes"]
    assert manifest["eigprec_wheel"].startswith("eigprec-")
    assert sum(f.stat().st_size for f in out.glob("*.whl")) == manifest["total_bytes"]


def test_eigprec_wheel_carries_its_license(tmp_path):
    pytest.importorskip("setuptools", minversion="77")  # PEP 639 license-files
    gpu_wheels._eigprec_wheel(tmp_path)
    (wheel,) = tmp_path.glob("eigprec-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        licenses = [n for n in names if n.endswith("/LICENSE") and ".dist-info/" in n]
        assert licenses, names
        assert zf.read(licenses[0]) == (ROOT / "LICENSE").read_bytes()
        meta = zf.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "License-Expression: MIT" in meta and "License-File: LICENSE" in meta
