"""The failure map of issue 37 (item 1): harm, the angle probe and the monitor, side by side.

Small layers keep these fast; what the map shows at chapter scale is guarded on the page
(book/degeneracy_details.md, section "A failure map").
"""

from __future__ import annotations

import math

import pytest
import torch
from eigprec_book.chapters.degeneracy import failure_map as fmod
from eigprec_book.chapters.degeneracy.failure_map import (
    ARMS,
    HARM_JUMP,
    REFERENCE_TRAINED,
    TURN_DEGREES,
    FailureMap,
    failure_map_experiment,
)
from eigprec_book.chapters.degeneracy.training import Regression, Setting, _Trainer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .conftest import once_per_run

SMALL = {"spike_step": 12, "window": 4, "k": 2, "batch": 16}


@pytest.fixture(scope="module")
def fmap(tmp_path_factory) -> FailureMap:
    return once_per_run(
        tmp_path_factory,
        "failure-map-experiment",
        lambda: failure_map_experiment(
            [((12, 6), 0.1), ((6, 12), 0.1)], spike_scales=(10.0, 1e4), seeds=(0, 1), **SMALL
        ),
    )


def test_one_row_per_layer_spike_arm_and_seed_with_float64_the_reference(fmap):
    assert len(fmap.rows) == 2 * 2 * len(ARMS) * 2
    assert fmap.config["arms"][0] == "float64"
    for r in fmap.rows:
        ref = next(
            x
            for x in fmap.rows
            if (x["shape"], x["lr"], x["spike"], x["seed"], x["arm"])
            == (r["shape"], r["lr"], r["spike"], r["seed"], "float64")
        )
        assert r["ratio"] == pytest.approx(r["peak"] / ref["peak"])
        # Harm is the run's own: its peak over its loss just before the spike.
        assert r["jump"] == pytest.approx(r["peak"] / r["before"])
        assert r["harmed"] == (r["jump"] > HARM_JUMP)
        assert r["reference failed"] == (not ref["before"] < REFERENCE_TRAINED * ref["start"])
        assert r["turned"] == (r["turn"] > TURN_DEGREES)
        assert r["damaged"] == (r["harmed"] or (r["turned"] and ref["turn"] <= TURN_DEGREES))
        assert 0.0 <= r["turn"] <= 90.0 + 1e-9
        assert 1 <= r["peak step"] <= SMALL["window"]
        if r["arm"] == "float64":
            assert r["ratio"] == 1.0


def test_the_fork_at_the_spike_is_the_run_without_a_fork():
    # The prefix is trained once and forked per spike size; a straight run must agree.
    fm = failure_map_experiment(
        [((12, 6), 0.1)], spike_scales=(1000.0,), arms=("float64",), seeds=(3,), **SMALL
    )
    problem = Regression((12, 6), SMALL["batch"], 1.0, 3)
    run = _Trainer(Setting("REKLS", dtype=torch.float64), problem, 0.1, 1e-8)
    losses = [
        run.advance(1000.0 if k == SMALL["spike_step"] else 1.0)
        for k in range(SMALL["spike_step"] + SMALL["window"] + 1)
    ]
    assert fm.rows[0]["peak"] == pytest.approx(max(losses[SMALL["spike_step"] + 1 :]), rel=1e-12)


def test_summary_counts_seeds_and_the_rates_add_up(fmap):
    summary = fmap.summary()
    assert len(summary) == len(fmap.cells()) == 2 * 2 * len(ARMS)
    for c in summary:
        rows = [
            r
            for r in fmap.cell(c["shape"], c["lr"], c["spike"], c["arm"])
            if not r["reference failed"]
        ]
        assert c["seeds"] + c["reference failed"] == 2 and c["seeds"] == len(rows)
        assert c["harmed"] == sum(r["harmed"] for r in rows)
        if rows:
            assert c["ratio min"] <= c["ratio median"] <= c["ratio max"]
            assert c["jump min"] <= c["jump median"] <= c["jump max"]
    for against in ("damaged", "harmed"):
        rates = fmap.detector_rates(against=against)
        assert rates["positive"] + rates["negative"] == rates["runs"] == len(fmap.valid())
        assert rates["false +"] <= rates["negative"] and rates["false -"] <= rates["positive"]
    empty = fmap.detector_rates([])
    assert math.isnan(empty["false + rate"]) and math.isnan(empty["false - rate"])
    with pytest.raises(ValueError, match="against"):
        fmap.detector_rates(against="turned")


def test_the_testbed_cell_is_harmed_turned_and_flagged_at_high():
    # The chapter's testbed (128×64, lr 0.1, ×1000) at 'high' with either rounding rule:
    # harmed, Q_L turned and the monitor flagged at the spike; float64 clean (one seed).
    fm = failure_map_experiment(
        [((128, 64), 0.1)], spike_scales=(1000.0,), seeds=(0,), window=20, turn_steps=3
    )
    by_arm = {r["arm"]: r for r in fm.rows}
    assert not by_arm["float64"]["flagged"] and not by_arm["float64"]["turned"]
    for arm in ("high rna", "high rne"):
        r = by_arm[arm]
        assert r["harmed"] and r["turned"] and r["first flag"] == 0 and r["flag before"] == 0


def _no_training(*args, **kwargs):
    raise AssertionError("an argument error must be raised before any training")


@settings(
    max_examples=40,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    bad=st.sampled_from(
        [
            {"layers": []},
            {"layers": [((12,), 0.1)]},
            {"layers": [((12, 0), 0.1)]},
            {"layers": [((12, 6.0), 0.1)]},
            {"layers": [((12, 6), 0.0)]},
            {"layers": [((12, 6), math.nan)]},
            {"layers": [((12, 6), "0.1")]},
            {"seeds": ()},
            {"seeds": (-1,)},
            {"seeds": (1.5,)},
            {"spike_scales": ()},
            {"spike_scales": (0.0,)},
            {"spike_scales": (math.inf,)},
            {"spike_scales": (True,)},
            {"arms": ("highest",)},
            {"arms": ("float64", "medium")},
            {"method": "Adam"},
            {"remedy": "float16 everything"},
            {"spike_step": 0},
            {"spike_step": 2.0},
            {"window": 0},
            {"turn_steps": 0},
            {"turn_steps": 6},
            {"k": 7},
            {"k": 0},
            {"eps": 0.0},
            {"eps": -1e-8},
            {"batch": 0},
        ]
    )
)
def test_bad_arguments_are_refused_before_any_training(monkeypatch, bad):
    monkeypatch.setattr(fmod, "_Trainer", _no_training)
    kwargs = {"layers": [((12, 6), 0.1)], "seeds": (0,), "spike_step": 12, "window": 4, "k": 2}
    kwargs.update(bad)
    with pytest.raises((TypeError, ValueError)) as info:
        failure_map_experiment(**kwargs)
    assert str(info.value)


def test_a_remedy_changes_every_arm_but_the_float64_reference():
    # The remedy's map keeps the plain float64 run as the reference of every ratio, so its
    # ratios compare the remedied run with the same float64 peak as the plain map's.
    kw = {"spike_scales": (1e4,), "arms": ("float64", "high rne"), "seeds": (0,), **SMALL}
    plain = failure_map_experiment([((12, 6), 0.1)], **kw)
    fixed = failure_map_experiment([((12, 6), 0.1)], remedy="relative eps", **kw)
    assert fixed.config["remedy"] == "relative eps" and plain.config["remedy"] == "none"
    by = {m: {r["arm"]: r for r in fm.rows} for m, fm in (("plain", plain), ("fixed", fixed))}
    assert by["fixed"]["float64"]["peak"] == by["plain"]["float64"]["peak"]
    assert by["fixed"]["high rne"]["peak"] != by["plain"]["high rne"]["peak"]


def test_docstring_examples():
    import doctest

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from eigprec_book.chapters.degeneracy import training_plots as tp

    assert doctest.testmod(fmod).failed == 0
    finder = doctest.DocTestFinder()
    runner = doctest.DocTestRunner()
    for test in finder.find(tp.plot_failure_map, "plot_failure_map", globs=vars(tp).copy()):
        runner.run(test)
    assert runner.failures == 0 and runner.tries > 0
    plt.close("all")


# --- issue 46 item 1: harm that means harm ---------------------------------------------------


def _row(arm, seed, before, peak, start=10.0, ref_before=1.0, **extra):
    ref_failed = not ref_before < REFERENCE_TRAINED * start
    return {
        "shape": (8, 4), "lr": 0.1, "spike": 1000.0, "arm": arm, "seed": seed,
        "start": start, "before": before, "peak": peak, "jump": peak / before,
        "ratio": 1.0, "reference failed": ref_failed, "turn": 0.0, "f64 turn": 0.0,
        "harmed": peak / before > HARM_JUMP, "turned": False, "damaged": peak / before > HARM_JUMP,
        "flag before": 0, "flagged": False, "first flag": None, **extra,
    }  # fmt: skip


def test_a_cell_whose_reference_diverged_is_left_out_of_every_count():
    # Seed 1's float64 run ended above its start before the spike (it diverged): its runs
    # are no evidence of harm, whatever their peaks.
    rows = [
        _row("float64", 0, before=1.0, peak=1.5),
        _row("highest", 0, before=1.0, peak=9.0),
        _row("float64", 1, before=80.0, peak=90.0, ref_before=80.0),
        _row("highest", 1, before=70.0, peak=900.0, ref_before=80.0),
    ]
    fm = FailureMap(rows=rows, config={})
    (f64, f32) = fm.summary()
    assert (f32["seeds"], f32["reference failed"], f32["harmed"]) == (1, 1, 1)
    assert f64["harmed"] == 0 and f32["jump median"] == 9.0
    assert fm.detector_rates()["runs"] == 2


def test_a_run_harmed_by_its_own_jump_counts_even_below_the_reference_peak():
    # One-sided preconditioning in the review: 0.65 before, 4.8 after -- "not harmed" by a
    # ratio to a worse reference (0.43-0.88), harmed by its own jump.
    rows = [_row("float64", 0, 6.5, 11.0), _row("highest", 0, 0.65, 4.8, ratio=0.44)]
    (_, f32) = FailureMap(rows=rows, config={}).summary()
    assert f32["harmed"] == 1


def test_classify_recounts_recorded_runs_under_todays_definitions():
    # A record keeps the losses; harm and a failed reference are recomputed from them, per
    # group (here two seed sets whose seed numbers coincide).
    f64 = {"shape": [8, 4], "lr": 0.1, "spike": 1e3, "seed": 0, "arm": "float64",
           "start": 30.0, "before": 6.0, "peak": 5.0, "harmed": True, "seed set": 0}  # fmt: skip
    rows = [
        f64,
        {**f64, "arm": "highest", "before": 6.0, "peak": 30.0, "harmed": False},
        {**f64, "seed set": 1000, "before": 31.0},  # this seed set's reference diverged
        {**f64, "seed set": 1000, "arm": "highest", "peak": 300.0},
    ]
    out = fmod.classify(rows, ("seed set",))
    assert [r["harmed"] for r in out] == [False, True, False, True]
    assert [r["reference failed"] for r in out] == [False, False, True, True]
    with pytest.raises(KeyError):
        fmod.classify(rows[1:2])
