"""The audit's memory stops growing once it holds its documented number of forward calls.

The audit remembers the last ``FORWARD_FRAMES_LIMIT`` (4,096) forward products to attribute
their backward products; past that bound, a training loop must not cost it anything per step.
"""

from __future__ import annotations

import gc
import tracemalloc
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import eigprec
from eigprec.audit import mode as _audit_mode
from eigprec.audit import tf32_audit
from eigprec.audit.recent import RecentCalls

# The audit's own bookkeeping. Not the whole package: objects the audited block itself
# creates (its tensors, which come and go) are allocated inside the audit's function modes
# (_tf32_plain.py) and made a few kB of noise between snapshots, more under pytest -n.
AUDIT_FILES = [
    tracemalloc.Filter(True, str(Path(eigprec.__file__).parent / name))
    for name in (
        "_audit_mode.py",
        "_recent_calls.py",
        "_audit_rows.py",
        "_audit_measures.py",
        "audit.py",
    )
]


def _held_by_eigprec() -> int:
    gc.collect()
    snapshot = tracemalloc.take_snapshot().filter_traces(AUDIT_FILES)
    return sum(stat.size for stat in snapshot.statistics("filename"))


def test_nothing_accumulates_per_step_past_the_bound(monkeypatch):
    # (A lowered bound keeps the loop short; the real one behaves alike, see
    # benchmarks/bench_audit_cli.py.) Before: a dict with the oldest entry deleted per call
    # doubled its table past the bound (deleted slots are reused only by a resize): 4.6 kB
    # here, 148 KiB at 4,096 -- about 100 bytes a step over the 1,400 steps it took.
    monkeypatch.setattr(_audit_mode, "FORWARD_FRAMES_LIMIT", 100)
    g = torch.Generator().manual_seed(0)
    w = torch.randn(4, 3, generator=g, requires_grad=True)
    x = torch.randn(2, 4, generator=g)
    tracemalloc.start()
    try:
        with tf32_audit() as report:
            for _ in range(400):  # the bound, then 300 steps for caches and free lists to settle
                (x @ w).sum().backward()
            at_bound = _held_by_eigprec()
            for _ in range(1500):
                (x @ w).sum().backward()
            after = _held_by_eigprec()
    finally:
        tracemalloc.stop()
    assert len(report._settings.forward_frames) == 100
    # (a few hundred bytes come and go as the records' worst errors are replaced by new
    # float objects; the doubled dict, in _audit_mode.py, grew this by 9 kB over 600 steps,
    # and 100 bytes a step would be 150 kB here)
    assert after - at_bound < 2_000
    # (the two loops are two lines of this file: two sites, each with its backward)
    assert sorted(r.calls for r in report.records) == [400, 400, 1500, 1500]
    assert {r.site for r in report.records if r.phase != "forward"} == {
        r.site for r in report.records if r.phase == "forward"
    }


@settings(max_examples=200, deadline=None)
@given(
    limit=st.integers(1, 8),
    steps=st.lists(st.integers(0, 3), max_size=40),  # key increments; 0 repeats the last key
    probes=st.lists(st.integers(-2, 90), max_size=10),
)
def test_recent_calls_remember_the_last_limit_keys_as_a_dict_would(limit, steps, probes):
    recent, reference = RecentCalls(limit), {}
    key = 0
    for i, step in enumerate(steps):
        key += step
        recent.put(key, i)
        reference[key] = i  # (a repeated key keeps its place and takes the new value)
        while len(reference) > limit:
            del reference[next(iter(reference))]
        assert len(recent) == len(reference)
    if steps:
        recent.put(key - 1, "ignored")  # an older key: autograd's counter only grows
    for probe in [*probes, *reference]:
        assert recent.get(probe) == reference.get(probe)


def test_recent_calls_refuse_an_empty_limit():
    with pytest.raises(ValueError, match="limit must be >= 1, got 0"):
        RecentCalls(0)
