"""The box's lines tested cell by cell, map and held-out (issue 46 item 3)."""

from __future__ import annotations

import math

import pytest
from eigprec_book.chapters.degeneracy import advice


def _row(arm, seed, peak, *, kind="precision", cells="map", shape=(128, 64), method="REKLS",
         before=1.0, failed=False, seed_set=0):  # fmt: skip
    return {
        "cells": cells, "method": method, "shape": list(shape), "lr": 0.1, "spike": 1000.0,
        "seed set": seed_set, "seed": seed, "kind": kind, "arm": arm, "peak": peak,
        "before": before, "jump": peak / before, "harmed": peak / before > 2.0,
        "reference failed": failed,
    }  # fmt: skip


def _line(name_part):
    return next(line for line in advice.LINES if name_part in line.name)


def test_a_line_goes_in_the_box_only_if_it_held_on_map_and_held_out_cells():
    highest_first = _line("'highest', not 'high'")
    rows = []
    for cells, worse in (("map", 3.0), ("held-out", 3.0)):
        for s in range(3):
            rows += [_row("highest", s, 1.5, cells=cells), _row("high rna", s, worse, cells=cells)]
    (result,) = advice.validate(rows, [highest_first])
    assert result["in box"] and len(result["held"]["held-out"]) == 1
    # The same line fails on one held-out cell: out of the box, the cell named.
    rows += [_row("highest", s, 5.0, cells="held-out", shape=(384, 64)) for s in range(3)]
    rows += [_row("high rna", s, 2.0, cells="held-out", shape=(384, 64)) for s in range(3)]
    (result,) = advice.validate(rows, [highest_first])
    assert not result["in box"]
    assert result["failed"]["held-out"] == [("held-out", "REKLS", (384, 64), 0.1, 1000.0)]


def test_a_line_never_tried_held_out_stays_out_of_the_box():
    rows = [_row("highest", 0, 1.0), _row("high rna", 0, 3.0)]
    (result,) = advice.validate(rows, [_line("'highest', not 'high'")])
    assert result["held"]["map"] and not result["in box"]


def test_runs_whose_reference_failed_are_no_evidence():
    rows = [_row("highest", 0, 9.0, failed=True), _row("high rna", 0, 1.0, failed=True)]
    (result,) = advice.validate(rows, [_line("'highest', not 'high'")])
    assert result["evidence"] == {} and not result["in box"]
    summary = advice.cell_summary(rows[:1])
    assert summary["runs"] == 0 and summary["reference failed"] == 1
    assert math.isnan(summary["peak median"])


def test_paired_ratios_pair_the_same_seed_of_the_same_seed_set():
    a = [_row("highest", 0, 2.0), _row("highest", 0, 8.0, seed_set=1000)]
    b = [_row("high rna", 0, 4.0, seed_set=1000), _row("high rna", 0, 1.0)]
    assert sorted(advice.paired_ratio(a, b)) == [2.0, 2.0]


def test_an_unknown_setting_is_refused_by_name():
    with pytest.raises(KeyError):
        advice.setting_of({"kind": "precision", "arm": "medium"})


def test_every_line_has_a_short_unique_label_for_the_tables():
    # The advice page's table shows labels, the prose the full lines (a line in a table cell
    # that does not wrap made the table 2236 px wide on a 688 px column).
    labels = [line.label for line in advice.LINES]
    assert len(set(labels)) == len(labels)
    assert all(0 < len(label) <= 30 for label in labels), labels
    rows = [v["label"] for v in advice.validate([])]
    assert rows == labels
