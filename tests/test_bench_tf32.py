"""CPU-checkable parts of ``python -m eigprec_book.record tf32``."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from eigprec_book.record import tf32 as bench
from eigprec_book.record import write_record
from eigprec_book.record.cli import build_parser, main

from eigprec.tf32 import ROUNDINGS, emulate_tf32

SRC = Path(__file__).resolve().parents[1] / "src"


def fake_record() -> dict:
    """A record with the real structure: probe and diag run on the CPU (emulated)."""
    with emulate_tf32("rna"):
        rounding = bench.rounding_probe("cpu")
        rounding_medium = bench.rounding_probe("cpu", mode="medium")
    return {
        "schema": bench.SCHEMA,
        "provenance": {
            "gpu": "Fake GPU",
            "compute_capability": "8.0",
            "driver": "000.00",
            "torch": torch.__version__,
            "cuda": "12.x",
            "date": "2026-01-01T00:00:00+00:00",
        },
        "rounding": rounding,
        "rounding_medium": rounding_medium,
        "diag_qtlq": bench.diag_record("cpu"),
        "throughput": [
            {"size": 1024, "fp32_tflops": 1.0, "tf32_tflops": 2.0, "3xtf32_tflops": 0.7}
        ],
    }


def test_parser_defaults_and_sizes():
    args = build_parser().parse_args(["tf32", "--out", "o.json", "--sizes", "256,512"])
    assert (args.command, args.out, args.sizes, args.repeats) == ("tf32", "o.json", [256, 512], 20)
    assert build_parser().parse_args(["tf32", "--out", "o.json"]).sizes == [1024, 2048, 4096, 8192]


def test_parser_requires_out_and_command():
    with pytest.raises(SystemExit):
        build_parser().parse_args(["tf32"])
    with pytest.raises(SystemExit):
        build_parser().parse_args([])


@pytest.mark.skipif(
    torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA"
)
def test_refuses_without_cuda(tmp_path, capsys):
    out = tmp_path / "tf32.json"
    assert main(["tf32", "--out", str(out)]) == 2
    assert "torch.cuda.is_available() is False" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.skipif(
    torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA"
)
def test_module_entry_point_refuses(tmp_path):
    out = tmp_path / "tf32.json"
    proc = subprocess.run(
        [sys.executable, "-m", "eigprec_book.record", "tf32", "--out", str(out)],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": f"{SRC}{os.pathsep}{SRC.parent / 'bookpkg'}", "PATH": ""},
        check=False,
    )
    assert proc.returncode == 2 and "compute capability >= 8.0" in proc.stderr
    assert not out.exists()


def test_rejects_nonpositive_sizes(tmp_path, capsys):
    assert main(["tf32", "--out", str(tmp_path / "x.json"), "--sizes", "0"]) == 2
    assert "positive" in capsys.readouterr().err


@pytest.mark.parametrize("rounding", ROUNDINGS)
def test_probe_values_tell_every_rounding_apart(rounding):
    with emulate_tf32(rounding):
        probe = bench.rounding_probe("cpu")
    assert probe["matches"]["first_operand"] == [rounding]
    assert probe["matches"]["second_operand"] == [rounding]
    assert probe["matches"]["matrix_vector"] == ["fp32"]  # mv is left unrounded
    native = bench.rounding_probe("cpu")
    assert native["matches"]["first_operand"] == ["fp32"]


def test_record_round_trip(tmp_path):
    record = fake_record()
    bench.validate_record(record)
    path = write_record(record, tmp_path / "sub" / "tf32_gpu.json")
    again = json.loads(path.read_text())
    bench.validate_record(again)
    assert again == json.loads(json.dumps(record))
    assert len(again["diag_qtlq"]["tf32"]) == 128


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda r: r.pop("throughput"), "missing 'throughput'"),
        (lambda r: r["rounding_medium"].pop("matches"), "rounding_medium.matches"),
        (lambda r: r.__setitem__("schema", "other/0"), "schema"),
        (lambda r: r["provenance"].pop("gpu"), "provenance.gpu"),
        (lambda r: r["diag_qtlq"]["tf32"].pop(), "diag_qtlq.tf32"),
        (lambda r: r["throughput"][0].pop("tf32_tflops"), "tf32_tflops"),
        (lambda r: r.__setitem__("throughput", []), "empty"),
        (lambda r: r.__setitem__("coverage", {"mm": {"high": 1e-4}}), "coverage.mm"),
    ],
)
def test_validate_names_the_problem(mutate, message):
    record = copy.deepcopy(fake_record())
    mutate(record)
    with pytest.raises(ValueError, match=message):
        bench.validate_record(record)


def test_coverage_probe_on_the_cpu_sees_float32_everywhere():
    # No TF32 on a CPU: every family at float32's level at both precisions, and the eigh
    # backward untouched by 'high'; a recording without coverage stays valid.
    from eigprec_book.chapters.tf32.probes import TF32_LEVEL, coverage_probe

    cov = coverage_probe("cpu")
    assert set(cov) == {
        "mm",
        "vecmat",
        "linear1d",
        "mv",
        "conv",
        "lstm",
        "sdpa",
        "cdist",
        "eigh_backward",
    }
    for row in cov.values():
        assert row["switches_high"] and row["switches_highest"]
        assert 0 < row["highest"] < TF32_LEVEL and 0 < row["high"] < TF32_LEVEL
        assert not row["tf32_at_highest"] and not row["tf32_at_high"]
    assert cov["eigh_backward"]["changed_by_high"] is False
    record = copy.deepcopy(fake_record())
    record["coverage"] = cov
    bench.validate_record(record)


def test_write_record_rejects_bad_input(tmp_path):
    with pytest.raises(TypeError, match="dict"):
        write_record([1, 2], tmp_path / "x.json")
    with pytest.raises(ValueError):
        write_record({"x": float("nan")}, tmp_path / "x.json")


@pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.get_device_capability() < (8, 0),
    reason="needs an NVIDIA GPU with compute capability >= 8.0",
)
def test_measure_on_gpu(tmp_path):
    assert (
        main(["tf32", "--out", str(tmp_path / "r.json"), "--sizes", "512", "--repeats", "3"]) == 0
    )
    bench.validate_record(json.loads((tmp_path / "r.json").read_text()))


def test_docstring_examples():
    import doctest

    from eigprec_book.record import _record, cli

    for module in (_record, cli, bench):
        result = doctest.testmod(module)
        assert result.attempted > 0 and result.failed == 0
