"""The recorder of the remedies on the failure map's failing cells (issue 37, item 3)."""

import doctest
import json

import pytest
from eigprec_book.chapters.degeneracy.failure_map import harm_counts
from eigprec_book.chapters.degeneracy.schedule_methods import clipped_spike
from eigprec_book.record import degeneracy_remedies as remedy_record
from eigprec_book.record.degeneracy_remedies import (
    load_remedy_record,
    main,
    merge_records,
    record_remedies,
)

TINY = {
    "layers": [((8, 4), 0.1)],
    "spike_scales": (1000.0,),
    "arms": ("float64", "highest"),
    "seeds": (0,),
    "window": 3,
    "spike_step": 12,
    "turn_steps": 2,
    "k": 2,
}


def test_docstring_examples_run():
    result = doctest.testmod(remedy_record)
    assert result.attempted > 0 and result.failed == 0


def test_record_has_every_remedy_and_the_clip_with_the_spike_it_passed():
    record = record_remedies(["none", "one-sided"], cells=TINY)
    assert list(record["remedies"]) == ["none", "one-sided"]
    rows = record["remedies"]["one-sided"]
    # Per-run rows (the page recounts them under its harm definition), each with its seed set.
    assert [r["arm"] for r in rows] == ["float64", "highest"]
    assert rows[0]["ratio"] == 1.0 and rows[0]["seed set"] == 0  # float64: the reference
    assert {"before", "peak", "jump", "reference failed"} <= set(rows[1])
    clip = record["global clip"]
    assert set(clip) == {"0.0001", "0.01"}
    row = clip["0.0001"][0]
    assert row["spike"] == 1000.0
    assert row["passed spike"] == pytest.approx(clipped_spike(1000.0, 1e-4))


def test_merge_and_load_round_trip(tmp_path):
    a = record_remedies(["none"], clip=False, cells=TINY)
    b = record_remedies(["relative eps"], clip=False, cells=TINY)
    for part, name in ((a, "a.json"), (b, "b.json")):
        (tmp_path / name).write_text(json.dumps(part))
    out = tmp_path / "m.json"
    args = ["--merge", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--out", str(out)]
    assert main(args) == 0
    merged = load_remedy_record(out)
    assert list(merged["remedies"]) == ["none", "relative eps"]
    assert len(merged["provenance"]["parts"]) == 2
    with pytest.raises(ValueError, match="two parts"):
        merge_records([a, a])
    other = json.loads(json.dumps(b))
    other["config"]["window"] = 4
    with pytest.raises(ValueError, match="different cells"):
        merge_records([a, other])


def test_bad_input_is_refused_before_any_work(tmp_path):
    with pytest.raises(ValueError, match="remedy"):
        record_remedies(["prayer"], cells=TINY)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"schema": remedy_record.SCHEMA}))
    with pytest.raises(ValueError, match="missing"):
        load_remedy_record(bad)


def test_harm_counts_add_over_the_chosen_arms():
    rows = [
        {"arm": "highest", "harmed": 2, "seeds": 5},
        {"arm": "high rna", "harmed": 5, "seeds": 5},
        {"arm": "high rne", "harmed": 4, "seeds": 5},
    ]
    assert harm_counts(rows, ["high rna", "high rne"]) == (9, 10)
    assert harm_counts(rows, []) == (0, 0)
