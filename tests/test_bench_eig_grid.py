"""The eig recorder's accuracy-and-time grid and its dry run, on the CPU (issue 33, item 1).

The dry run (``python -m eigprec_book.record eig --dry-run``) records the torch parts on small CPU
shapes; with the fake CuPy the grid also measures ``cupy.syevjBatched`` through the bridge.
Only the record's layout and its internal consistency are checked here: the rule's verdicts
on CPU timings say nothing about a GPU.
"""

from __future__ import annotations

import argparse
import json

import pytest
import torch
from eigprec_book.chapters.clarke import speed
from eigprec_book.record import _eig_grid
from eigprec_book.record import eig as bench_eig
from eigprec_book.record import eig_rule as _eig_choice

from ._fake_cupy import FakeCupy
from .test_bench_eig_cupy import _fake_gpu


@pytest.fixture
def small_tradeoff(monkeypatch):
    real = speed.inverse_iteration_tradeoff
    monkeypatch.setattr(
        speed,
        "inverse_iteration_tradeoff",
        lambda **kw: real(**{**kw, "batch": 24, "n": 12, "k": 6}),
    )


def test_grid_shapes_cover_n_8_to_2048_and_batch_1_to_4096_within_memory():
    shapes = _eig_grid.grid_shapes()
    assert {n for _, n in shapes} == set(_eig_grid.GRID_SIZES)
    assert {b for b, _ in shapes} == set(_eig_grid.GRID_BATCHES)
    assert (1, 2048) in shapes and (4096, 8) in shapes and (4096, 2048) not in shapes
    assert all(b * n * n <= _eig_grid.MAX_ELEMENTS for b, n in shapes)
    costs = [b * n**3 for b, n in shapes]
    assert costs == sorted(costs)  # cheapest first: a budget cut drops the costliest


def test_dry_run_writes_a_valid_record_with_the_accuracy_grid(tmp_path, small_tradeoff, capsys):
    out = tmp_path / "eig.json"
    args = argparse.Namespace(
        out=out, repeats=10, sizes=[8], batches=[2], budget=60.0, no_sweep=False, dry_run=True
    )
    assert bench_eig.run(args) == 0
    rec = json.loads(out.read_text())
    bench_eig.validate_record(rec)
    assert rec["schema"] == bench_eig.SCHEMA and rec["provenance"]["device"] == "cpu"
    grid = rec["accuracy_grid"]
    assert [(r["batch"], r["n"]) for r in grid["rows"]] == _eig_grid.DRY_RUN["grid"]
    assert grid["solvers"] == [
        "torch.eigvalsh",
        "torch.eigh",
        "syevd.loop",
        "kth.auto.value",
        "kth.auto",
    ]
    for row in grid["rows"]:
        s = row["solvers"]
        assert set(s) == set(grid["solvers"]) and row["k"] == row["n"] // 3
        assert s["torch.eigvalsh"]["residual"] is None  # values only
        for name in ("torch.eigh", "syevd.loop", "kth.auto"):
            # float32 against float64, ‖A‖-relative: a few eps
            assert s[name]["value_error"] < 1e-5 and s[name]["residual"] < 1e-5, name
            assert s[name]["orthogonality"] < 1e-5, name
        assert row["auto"]["backend"] == "torch"
        rule_row = {
            "n": row["n"],
            "batch": row["batch"],
            "solvers": {k: v for k, v in s.items() if not k.startswith("kth.auto")},
        }
        assert row["acceptable"]["forward"] == _eig_choice.acceptable(rule_row, "forward")
        assert "torch.eigvalsh" not in row["acceptable"]["train"]  # it gives no eigenvector
        assert row["auto_meets_rule"]["train"] == _eig_choice.meets_rule(
            rule_row, s["kth.auto"], "train"
        )
    assert "accuracy grid: 3 shapes" in capsys.readouterr().out


def test_accuracy_grid_through_the_fake_cupy(monkeypatch, small_tradeoff):
    _fake_gpu(monkeypatch, FakeCupy())
    rows, skipped = _eig_grid.measure_accuracy_grid(
        [(3, 12), (2, 40)],
        ["torch.eigh", "cupy.syevjBatched", "kth.auto.value", "kth.auto"],
        device="cpu",
        max_repeats=1,
        budget_s=0.01,
    )
    assert skipped == []
    for row in rows:
        cupy = row["solvers"]["cupy.syevjBatched"]
        # the fake solves in float64 and rounds: as accurate as LAPACK's float32
        assert cupy["value_error"] < 1e-6 and cupy["residual"] < 1e-5
        assert cupy["orthogonality"] < 1e-5


def test_a_failed_solver_counts_as_a_full_error():
    A = torch.eye(3)[None]
    nan = torch.full((1,), float("nan"))
    acc = _eig_grid.accuracy(A, 0, (nan, torch.full((1, 3), float("nan")), None))
    assert acc == {"value_error": 1.0, "residual": 1.0, "orthogonality": 1.0}


def test_budget_spent_skips_shapes():
    rows, skipped = _eig_grid.measure_accuracy_grid(
        [(1, 8)], ["torch.eigh"], device="cpu", deadline=0.0
    )
    assert rows == [] and skipped == [{"what": "accuracy grid batch=1, n=8", "why": "budget spent"}]


def test_validate_rows_names_the_bad_field(tmp_path, small_tradeoff):
    rec = bench_eig.record(**_eig_grid.DRY_RUN)
    bad = json.loads(json.dumps(rec))
    bad["accuracy_grid"]["rows"][0]["solvers"]["torch.eigh"]["seconds"] = 0.0
    with pytest.raises(ValueError, match=r"torch\.eigh time"):
        bench_eig.validate_record(bad)
    del bad["accuracy_grid"]
    with pytest.raises(ValueError, match="accuracy_grid"):
        bench_eig.validate_record(bad)
    old = json.loads(json.dumps(rec))
    old["schema"] = "eigprec.bench.eig/3"
    del old["accuracy_grid"]
    bench_eig.validate_record(old)  # the H100 record's schema stays readable


def test_eig_record_writes_nan_as_null(tmp_path):
    # The H200 run of 27 November 2026 measured for 166 s and then lost everything: a NaN in
    # the record (a solver's failure) and json.dumps(allow_nan=False). Non-finite floats are
    # written as null.
    from eigprec_book.record import _record

    rec = {"a": float("nan"), "b": [1.0, float("inf"), {"c": -float("inf")}], "d": "x"}
    path = _record.write_record(_record.finite(rec), tmp_path / "r.json")
    assert json.loads(path.read_text()) == {"a": None, "b": [1.0, None, {"c": None}], "d": "x"}


def test_eig_recorder_keeps_what_it_measured_when_interrupted(monkeypatch, tmp_path):
    # The harness stops a step over its limit with SIGINT. The H200 call of 27 November lost
    # a 118 s eig record that way (KeyboardInterrupt inside a long shape of the accuracy
    # grid): the shapes measured must be kept, the rest listed as interrupted.
    from eigprec_book.record import _eig_grid
    from eigprec_book.record import eig as bench_eig

    real = _eig_grid.accuracy
    calls = {"n": 0}

    def accuracy_then_interrupt(*a, **kw):
        calls["n"] += 1
        if calls["n"] > 5:  # one shape has five solvers on the CPU; the second is cut
            raise KeyboardInterrupt
        return real(*a, **kw)

    monkeypatch.setattr(_eig_grid, "accuracy", accuracy_then_interrupt)
    rec = bench_eig.record(**_eig_grid.DRY_RUN)
    assert len(rec["accuracy_grid"]["rows"]) == 1
    whys = [s["why"] for s in rec["skipped"]]
    assert any("interrupted" in w for w in whys), whys
    assert rec["inverse_iteration"] is None


def test_the_dry_run_records_the_benchmarks_thin_path_grid(small_tradeoff, capsys):
    # Issue 49: the GPU recorder records the grid benchmarks/bench_eig.py measures on the CPU
    # (kth_eigvalsh ÷ torch.linalg, value and training step, both subgradients); on the CPU
    # the dry run measures two small shapes of it, with the same code.
    rec = bench_eig.record(**_eig_grid.DRY_RUN)
    thin = rec["thin_grid"]
    assert [(r["batch"], r["n"]) for r in thin["rows"]] == _eig_grid.DRY_RUN["thin_grid"]
    assert set(thin["ratios"]) == set(speed.THIN_RATIOS) and thin["target"] == 1.10
    for row in thin["rows"]:
        assert row["rounds"] >= 1 and all(r["median"] > 0 for r in row["ratios"].values())
    grid = ((1, 8), (64, 8), (1, 32), (2000, 45), (500, 100), (64, 256), (8, 1024))
    assert speed.THIN_GRID == grid
    bench_eig.report(rec)
    assert "thin-path grid" in capsys.readouterr().out
    bad = json.loads(json.dumps(rec))
    del bad["thin_grid"]["rows"][0]["ratios"]["mean"]
    with pytest.raises(ValueError, match="ratios"):
        bench_eig.validate_record(bad)
    del bad["thin_grid"]
    with pytest.raises(ValueError, match="thin_grid"):
        bench_eig.validate_record(bad)
