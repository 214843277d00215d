"""CPU-checkable parts of ``python -m eigprec_book.record degeneracy``."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys

import pytest
import torch
from eigprec_book.record import degeneracy as bench
from eigprec_book.record.cli import COMMANDS, build_parser, main

from eigprec.precision import current_matmul_precision

from .conftest import ROOT


@pytest.fixture(scope="module")
def cpu_record():
    # TF32 emulated on the CPU and a toy size: the record's layout, not the GPU's numbers.
    before = current_matmul_precision()
    rec = bench.record(
        device="cpu", shape=(8, 4), steps=8, spike_step=4, offsets=(1, 2), cost_shapes=((6, 3),)
    )
    assert current_matmul_precision() == before  # no global state left changed
    return rec


def test_registered_and_parsed():
    assert COMMANDS["degeneracy"][0] == "eigprec_book.record.degeneracy"
    args = build_parser().parse_args(["degeneracy", "--out", "d.json"])
    assert (args.out, args.steps, args.budget) == ("d.json", 200, 130.0)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["degeneracy"])
    assert main(["degeneracy", "--out", "d.json", "--steps", "10"]) == 2


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal without CUDA")
def test_refuses_without_cuda(tmp_path):
    out = tmp_path / "degeneracy.json"
    proc = subprocess.run(
        [sys.executable, "-m", "eigprec_book.record", "degeneracy", "--out", str(out)],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT / 'bookpkg'}", "PATH": ""},
        check=False,
    )
    assert proc.returncode == 2
    assert "torch.cuda.is_available() is False" in proc.stderr
    assert not out.exists()


def test_cpu_record_layout(cpu_record):
    rec = cpu_record
    bench.validate_record(rec)
    json.dumps(rec, allow_nan=False)
    labels = [r["label"] for r in rec["runs"]]
    assert labels == [f"{m} {c}" for m in bench.METHODS for c in bench.CONFIGS]
    by_label = {r["label"]: r for r in rec["runs"]}
    assert (
        by_label["SOAP high"]["tf32"] == "emulated" and by_label["SOAP highest"]["tf32"] == "none"
    )
    assert by_label["REKLS high + relative eps"]["config"]["eps_mode"] == "relative"
    assert by_label["REKLS high + float64 eigenvalues"]["config"]["eigval_dtype"] == "float64"
    assert [a["quantity"] for a in by_label["SOAP high"]["angles"]] == ["top-1", "top-8 subspace"]
    assert set(rec["spike_top1_angle_one_step_after"]["REKLS"]) == {"high", "highest"}
    (row,) = [r for r in rec["step_cost"] if r["method"] == "SOAP"]
    assert set(row["ms_per_step"]) == set(bench.CONFIGS) and row["vs_high"]["high"] == 1.0
    assert rec["skipped"] == []


def test_validate_record_rejects(cpu_record):
    bad = copy.deepcopy(cpu_record)
    bad["runs"][0]["tf32"] = "maybe"
    with pytest.raises(ValueError, match="tf32='maybe'"):
        bench.validate_record(bad)
    bad = copy.deepcopy(cpu_record)
    bad["runs"], bad["skipped"] = [], []
    with pytest.raises(ValueError, match="no runs"):
        bench.validate_record(bad)
    bad = copy.deepcopy(cpu_record)
    bad["step_cost"][0]["ms_per_step"]["high"] = -1.0
    with pytest.raises(ValueError, match="lacks times"):
        bench.validate_record(bad)
    with pytest.raises(ValueError, match="schema"):
        bench.validate_record({**cpu_record, "schema": "x"})
