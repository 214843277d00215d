"""eigprec.book.guard/check and the guard-margin report (issue 32)."""

import json
import math
import sys

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from eigprec.book import guards
from eigprec.book.guards import between, check, guard, guard_records, relative_margin

from .conftest import ROOT

sys.path.insert(0, str(ROOT / "tools"))
import guard_margins
import robustness


def test_a_passing_guard_records_its_margin_and_a_failing_one_raises_naming_it():
    guard("turn", 88.0, ">", 80.0)
    rec = guard_records()[-1]
    assert (rec.name, rec.value, rec.op, rec.bound, rec.passed) == ("turn", 88.0, ">", 80.0, True)
    assert rec.margin == pytest.approx(0.1)
    with pytest.raises(AssertionError, match=r"'turn' failed: 78\.0 > 80\.0"):
        guard("turn", 78.0, ">", 80.0)
    assert guard_records()[-1].passed is False
    assert guard_records()[-1].margin == pytest.approx(-0.025)


def test_tensors_and_numpy_numbers_are_read_as_numbers_and_nan_fails():
    import numpy as np

    guard("tensor", torch.tensor(0.5), "<", np.float32(1.0))
    assert guard_records()[-1].margin == pytest.approx(0.5)
    with pytest.raises(AssertionError):
        guard("nan", float("nan"), "<", 1.0)
    assert guard_records()[-1].margin is None


@pytest.mark.parametrize(
    ("args", "error", "match"),
    [
        (("", 1.0, "<", 2.0), TypeError, "name"),
        (("x", 1.0, "=<", 2.0), ValueError, "op must be one of"),
        (("x", "1", "<", 2.0), TypeError, "value must be a real number"),
        (("x", torch.ones(3), "<", 2.0), TypeError, "3 elements"),
        (("x", 1.0, "<", None), TypeError, "bound must be a real number"),
    ],
)
def test_bad_input_is_refused_before_anything_is_recorded(args, error, match):
    before = len(guard_records())
    with pytest.raises(error, match=match):
        guard(*args)
    assert len(guard_records()) == before


def test_exact_bounds_and_equalities_have_no_margin():
    guard("printed", 1.3e-5, ">=", 1.23e-5, exact="printed rounding")
    assert guard_records()[-1].margin is None
    assert guard_records()[-1].exact == "printed rounding"
    guard("count", 3, "==", 3)
    assert guard_records()[-1].margin is None
    check("flag", torch.tensor(True))
    assert guard_records()[-1].op == "true"
    with pytest.raises(AssertionError, match="'flag' failed"):
        check("flag", False)


@given(
    st.floats(-1e6, 1e6, allow_nan=False),
    st.floats(-1e6, 1e6, allow_nan=False),
    st.sampled_from(["<", "<=", ">", ">="]),
)
def test_the_margin_is_negative_exactly_when_the_guard_fails(value, bound, op):
    m = relative_margin(value, op, bound)
    holds = {"<": value < bound, "<=": value <= bound, ">": value > bound, ">=": value >= bound}
    if m > 0:
        assert holds[op]
    if m < 0:
        assert not holds[op]
    if value != bound and holds[op]:
        assert m > 0


def test_guards_append_to_the_log_file_the_build_names(tmp_path, monkeypatch):
    log = tmp_path / "page.jsonl"
    monkeypatch.setenv(guards.GUARD_LOG_ENV, str(log))
    guard("a", 2.0, "<", 4.0)
    guard("inf", math.inf, ">", 1.0)
    check("b", True)
    rows = guard_margins.read_page(log)
    assert [r["name"] for r in rows] == ["a", "inf", "b"]
    assert rows[0]["margin"] == 0.5 and rows[1]["value"] == math.inf


def _page_log(folder, page, rows):
    with open(folder / f"{page}.jsonl", "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def _row(name, value, margin, passed=True):
    return {"name": name, "value": value, "op": ">", "bound": 1.0, "margin": margin,
            "exact": "", "passed": passed}  # fmt: skip


def test_the_report_merges_pages_lists_the_thinnest_and_the_pages_without_records(tmp_path):
    _page_log(tmp_path, "a", [_row("wide", 3.0, 2.0), _row("thin", 1.05, 0.05)])
    _page_log(tmp_path, "b", [_row("mid", 1.5, 0.5)])
    report = guard_margins.merge(tmp_path, ["a", "b", "c"], {"name": "test"})
    assert report["pages_without_record"] == ["c"]
    assert [r["name"] for r in guard_margins.thinnest(report["guards"], 2)] == ["thin", "mid"]
    text = "\n".join(guard_margins.summary_lines(report))
    assert "3 guards on 2 pages" in text and "THIN" in text and "c" in text
    guard_margins.write(report, tmp_path / "out.json")
    assert json.loads((tmp_path / "out.json").read_text())["configuration"]["name"] == "test"


def test_robustness_merge_keeps_each_configuration_and_the_worst_margin():
    reports = {
        "one": {"guards": [{"page": "p", **_row("g", 1.5, 0.5)}]},
        "two": {"guards": [{"page": "p", **_row("g", 0.9, -0.1, passed=False)}]},
    }
    [row] = robustness.merge(reports)
    assert row["values"] == {"one": 1.5, "two": 0.9}
    assert row["worst_margin"] == -0.1 and row["failed_in"] == ["two"]
    assert "| -10.0% | p | g |" in robustness.markdown([row], {
        k: {**v, "exit_status": 0, "seconds": 1} for k, v in reports.items()})  # fmt: skip


def test_the_configuration_matrix_varies_threads_kernels_blas_and_rounding():
    envs = [robustness.CONFIGS[name] for name in robustness.DEFAULT_CONFIGS]
    assert any(e.get("OMP_NUM_THREADS") == "1" for e in envs)
    assert any(e.get("ATEN_CPU_CAPABILITY") == "default" for e in envs)
    assert any("MKL_ENABLE_INSTRUCTIONS" in e or "MKL_CBWR" in e for e in envs)
    assert any(e.get("EIGPREC_TF32_ROUNDING") == "rne" for e in envs)
    assert any(e.get("OMP_NUM_THREADS") == robustness.CORES for e in envs)


def test_measure_only_records_a_failure_and_goes_on_but_only_with_a_log(tmp_path, monkeypatch):
    monkeypatch.setenv(guards.GUARD_MEASURE_ENV, "1")
    with pytest.raises(AssertionError):  # no log to record it in: it must still fail
        guard("no log", 0.5, ">", 1.0)
    monkeypatch.setenv(guards.GUARD_LOG_ENV, str(tmp_path / "p.jsonl"))
    guard("measured", 0.5, ">", 1.0)
    check("measured too", False)
    rows = guard_margins.read_page(tmp_path / "p.jsonl")
    assert [(r["name"], r["passed"]) for r in rows] == [
        ("measured", False),
        ("measured too", False),
    ]


def test_a_window_measures_its_margin_against_its_half_width():
    between("middle", 0.725, 0.65, 0.8)
    assert guard_records()[-1].margin == pytest.approx(1.0)
    between("near the top", 0.785, 0.65, 0.8)
    assert guard_records()[-1].margin == pytest.approx(0.2)
    with pytest.raises(AssertionError, match="not in"):
        between("outside", 0.85, 0.65, 0.8)
    assert guard_records()[-1].margin < 0
    with pytest.raises(AssertionError):
        between("an open end", 0.8, 0.65, 0.8)
    between("a closed end", 0.8, 0.65, 0.8, closed=True)
    between("positive and tiny", 1e-16, 0, 1e-12)  # a zero end is a sign check
    assert guard_records()[-1].margin == pytest.approx(1.0)
    with pytest.raises(ValueError, match="hi must be above lo"):
        between("empty", 0.7, 0.8, 0.65)
