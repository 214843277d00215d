"""eigprec_book.helpers.guard/check and the guard-margin report (issue 32)."""

import json
import math
import sys

import pytest
import torch
from eigprec_book.helpers import guards
from eigprec_book.helpers.guards import between, check, guard, guard_records, relative_margin
from hypothesis import given
from hypothesis import strategies as st

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
    check(torch.tensor(True), "flag")
    assert guard_records()[-1].op == "true"
    with pytest.raises(AssertionError, match="'flag' failed"):
        check(False, "flag")


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
    check(True, "b")
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
    # issue 45: two seed-shifted configurations beside the arithmetic ones
    offsets = {e["EIGPREC_SEED_OFFSET"] for e in envs if "EIGPREC_SEED_OFFSET" in e}
    assert len(offsets) >= 2 and "0" not in offsets


def test_robustness_keeps_each_counts_margin_in_runs_and_lists_the_thin_ones():
    g = {"page": "p", **_row("6 of 10 > half", 0.6, 0.2), "runs_margin": 1}
    reports = {"one": {"guards": [g]}, "two": {"guards": [{**g, "runs_margin": 3}]}}
    [row] = robustness.merge(reports)
    assert row["worst_runs"] == 1
    text = robustness.markdown(
        [row], {k: {**v, "exit_status": 0, "seconds": 1} for k, v in reports.items()}
    )
    assert "| 1 | p | 6 of 10 > half |" in text


def test_measure_only_records_a_failure_and_goes_on_but_only_with_a_log(tmp_path, monkeypatch):
    monkeypatch.setenv(guards.GUARD_MEASURE_ENV, "1")
    with pytest.raises(AssertionError):  # no log to record it in: it must still fail
        guard("no log", 0.5, ">", 1.0)
    monkeypatch.setenv(guards.GUARD_LOG_ENV, str(tmp_path / "p.jsonl"))
    guard("measured", 0.5, ">", 1.0)
    check(False, "measured too")
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


# --- issue 47 item 10: wrong inputs are refused or fail, never pass by accident ------------


def test_nan_fails_every_comparison_including_not_equal():
    with pytest.raises(AssertionError):
        guard("nan differs", float("nan"), "!=", 0.0)
    with pytest.raises(AssertionError):
        guard("against nan", 1.0, "!=", float("nan"))


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(complex(1, 5), id="complex"),
        pytest.param(__import__("numpy").complex128(1 + 5j), id="numpy complex"),
        pytest.param(torch.tensor(1 + 5j), id="complex tensor"),
    ],
)
def test_complex_numbers_are_refused_naming_the_problem(value):
    with pytest.raises(TypeError, match="real number"):
        guard("complex", value, "<", 2.0)


def test_integers_beyond_float_precision_compare_exactly():
    guard("bigint", 2**53 + 1, ">", 2**53)
    with pytest.raises(AssertionError):
        guard("bigint equal", 2**53 + 1, "==", 2**53)


@pytest.mark.parametrize(
    "condition",
    [
        pytest.param((v > 0 for v in [-1.0, -2.0]), id="generator"),
        pytest.param([False], id="list"),
        pytest.param("yes", id="str"),
        pytest.param(torch.tensor([True, False]), id="two-element tensor"),
    ],
)
def test_check_refuses_conditions_whose_truth_is_not_one_bool(condition):
    with pytest.raises(TypeError, match="condition"):
        check(condition, "all positive")


def test_an_infinite_window_end_keeps_a_finite_margin():
    between("wide", 0.5, -math.inf, 1.0)
    margin = guard_records()[-1].margin
    assert margin is not None and not math.isnan(margin) and margin > 0


def test_a_log_that_cannot_be_written_still_fails_the_guard_with_an_assertion(monkeypatch):
    if not __import__("os").path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    monkeypatch.setenv(guards.GUARD_LOG_ENV, "/dev/full")
    with pytest.raises(AssertionError, match="could not be written"):
        guard("fails", 0.5, ">", 1.0)
    monkeypatch.setenv(guards.GUARD_MEASURE_ENV, "1")
    with pytest.raises(AssertionError, match="could not be written"):
        guard("fails, measured only", 0.5, ">", 1.0)
    with pytest.raises(OSError, match="/dev/full"):
        guard("passes", 1.5, ">", 1.0)


# --- issue 44 item 5: one call that glues and guards; check without restating ---------------


def test_check_names_itself_from_its_own_source_when_given_no_words():
    lam = torch.tensor([1.0, float("nan")])
    check(torch.isnan(lam[1]))
    assert guard_records()[-1].name == "torch.isnan(lam[1])"
    check(lam[0] == 1.0, "the first value is one")
    assert guard_records()[-1].name == "the first value is one"
    with pytest.raises(AssertionError, match=r"torch\.isnan\(lam\[0\]\)"):
        check(torch.isnan(lam[0]))


def test_claim_glues_the_value_and_guards_it_under_one_name(monkeypatch):
    from eigprec_book.helpers import claim, notebook

    glued = []
    monkeypatch.setattr(
        notebook, "glue", lambda name, value, display=False: glued.append((name, value))
    )
    claim("turn", 88.0, ">", 80.0)
    assert glued == [("turn", 88.0)]
    assert (guard_records()[-1].name, guard_records()[-1].passed) == ("turn", True)
    with pytest.raises(AssertionError, match="'small' failed"):
        claim("small", 0.5, ">", 1.0)


# --- issue 45 item 2: a count's margin is in runs -------------------------------------------


@pytest.mark.parametrize(
    ("k", "n", "op", "bound", "share", "runs"),
    [
        (6, 10, ">", 0.5, True, 1),  # 6 of 10 against "more than half": one run from failing
        (5, 10, ">", 0.5, True, -1),  # the AVX-512 machine's 5 of 10
        (9, 10, ">", 0.5, True, 4),
        (0, 30, "<=", 2, False, 3),
        (10, 10, "==", 10, False, 1),
        (3, 10, ">=", 0, False, math.inf),  # a count cannot fall below 0
    ],
)
def test_a_count_records_how_many_runs_must_change_for_it_to_fail(k, n, op, bound, share, runs):
    value = k / n if share else k
    kw = {"share_of": n} if share else {"runs": n}
    if runs < 0:
        with pytest.raises(AssertionError):
            guard("count", value, op, bound, **kw)
    else:
        guard("count", value, op, bound, **kw)
    assert guard_records()[-1].runs_margin == runs


def test_count_guards_refuse_what_is_not_a_count_of_the_runs():
    with pytest.raises(ValueError, match="0 and 10"):
        guard("count", 11, "<", 20, runs=10)
    with pytest.raises(ValueError, match="whole number of runs"):
        guard("share", 0.55, ">", 0.5, share_of=10)
    with pytest.raises(TypeError, match="runs or share_of"):
        guard("both", 1, "<", 2, runs=10, share_of=10)


def test_the_report_ranks_counts_by_runs_and_calls_under_two_runs_thin(tmp_path):
    rows = [
        {**_row("relative", 1.5, 0.5)},
        {**_row("one run", 0.6, 0.2), "runs_margin": 1},
        {**_row("four runs", 0.9, 0.8), "runs_margin": 4},
    ]
    _page_log(tmp_path, "a", rows)
    report = guard_margins.merge(tmp_path, ["a"], {"name": "test"})
    text = "\n".join(guard_margins.summary_lines(report))
    assert "1 run" in text and "one run" in text
    thin = [line for line in text.splitlines() if "THIN" in line]
    assert any("one run" in line for line in thin)
    assert not any("four runs" in line for line in thin)


def test_a_live_run_that_disagrees_with_its_record_fails_the_build_saying_so():
    # Issue 45, item 3: a sentence stated of a live run and of a record of the same cell
    # holds for both, or the build fails naming the record and the cell.
    from eigprec_book.helpers import live_and_recorded

    live_and_recorded("harmed seeds", 5, {"seeds 0-4": 5}, ">=", 3, record="rec", cell="c", runs=5)
    with pytest.raises(AssertionError) as failed:
        live_and_recorded(
            "harmed seeds",
            1,
            {"seeds 0-4": 5, "seeds 1000-1004": 4},
            ">=",
            3,
            record="degeneracy_map_cpu",
            cell="REKLS 256x64 lr 0.1 x1000 'high'",
            runs=5,
        )
    message = str(failed.value)
    assert "the live run and the record disagree" in message
    assert "degeneracy_map_cpu (seeds 1000-1004): 4" in message
    assert "REKLS 256x64 lr 0.1 x1000 'high'" in message
    assert "this build's live run: 1" in message
    with pytest.raises(AssertionError, match="neither the live run nor the record"):
        live_and_recorded("x", 1.0, {"a": 2.0}, "<", 0.5, record="r", cell="c")
    with pytest.raises(ValueError, match="at least one seed set"):
        live_and_recorded("x", 1.0, {}, "<", 0.5, record="r", cell="c")
