"""The remedy record's runs under the chapter's harm (issue 46: own jump, failed references out)."""

import math

import pytest
from eigprec_book.chapters.degeneracy.remedy_record import (
    broken_count,
    harm_count,
    jump_median,
    remedy_runs,
)


def _run(arm, seed, before, peak, *, start=10.0, seed_set=0, **extra):
    return {
        "shape": [8, 4],
        "lr": 0.1,
        "spike": 1000.0,
        "seed": seed,
        "seed set": seed_set,
        "arm": arm,
        "start": start,
        "before": before,
        "peak": peak,
        **extra,
    }


def test_a_diverging_reference_takes_its_seed_out_of_every_count():
    trained, diverged = _run("float64", 0, 2.0, 2.0), _run("float64", 1, 40.0, 60.0)
    record = {
        "remedies": {
            "none": [
                trained,
                diverged,
                _run("high rna", 0, 1.0, 9.0),
                _run("high rna", 1, 1.0, 9.0),
            ],
            # A remedy's own float64 run is not its reference: "none"'s is.
            "one-sided": [
                _run("float64", 0, 50.0, 50.0),
                _run("high rna", 0, 1.0, 1.5),
                _run("high rna", 1, 1.0, 9.0),
            ],
        },
        "global clip": {"0.01": [_run("float64", 0, 2.0, 2.0), _run("highest", 0, 1.0, 3.0)]},
    }
    runs = remedy_runs(record)
    assert set(runs) == {"none", "one-sided", "global clip, s = 0.01"}
    assert harm_count(runs["none"], ["high rna"]) == (1, 1)
    assert harm_count(runs["one-sided"], ["high rna"]) == (0, 1)
    assert harm_count(runs["global clip, s = 0.01"], ["highest"]) == (1, 1)
    assert [r["reference failed"] for r in runs["none"]] == [False, True]
    assert jump_median(runs["none"], ["high rna"]) == 9.0
    assert math.isnan(jump_median(runs["none"], ["highest"]))


def test_counts_per_seed_set():
    record = {
        "remedies": {
            "none": [
                _run("float64", 0, 2.0, 2.0),
                _run("float64", 1000, 2.0, 2.0, seed_set=1),
                _run("highest", 0, 1.0, 3.0),
                _run("highest", 1000, 1.0, 1.0, seed_set=1),
            ]
        },
        "global clip": {},
    }
    rows = remedy_runs(record)["none"]
    assert harm_count(rows, ["highest"], seed_set=0) == (1, 1)
    assert harm_count(rows, ["highest"], seed_set=1) == (0, 1)
    assert harm_count(rows, ["highest"]) == (1, 2)


def test_a_run_without_its_reference_is_refused():
    record = {"remedies": {"none": [_run("highest", 0, 1.0, 3.0)]}, "global clip": {}}
    with pytest.raises(KeyError):
        remedy_runs(record)


def test_a_remedy_that_fails_before_the_spike_is_counted_broken_not_harmed():
    # The EMA estimator's start-up failure: high before the spike, so no jump after it.
    record = {
        "remedies": {
            "none": [_run("float64", 0, 2.0, 2.0)],
            "EMA eigenvalues": [_run("float64", 0, 2.0, 2.0), _run("highest", 0, 9.0, 9.5)],
        },
        "global clip": {},
    }
    rows = remedy_runs(record)["EMA eigenvalues"]
    assert harm_count(rows, ["highest"]) == (0, 1)
    assert broken_count(rows, ["highest"]) == (1, 1)
