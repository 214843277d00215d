"""Tests of the TF32 chapter's error model, knobs checks and audits (eigprec_book.chapters.tf32)."""

from __future__ import annotations

import doctest
import math

import eigprec_book.chapters.tf32.audits as audits
import eigprec_book.chapters.tf32.knobs as tk
import eigprec_book.chapters.tf32.model as tm
import pytest
import torch
from eigprec_book.chapters.tf32.experiments import OOTOMO_A100_TFLOPS, PUBLISHED_THROUGHPUT


@pytest.fixture(scope="module")
def contrib() -> tm.RoundingContributions:
    return tm.qtlq_rounding_contributions()


def test_contributions_add_up_and_separate(contrib):
    c = contrib
    # first order: the two roundings add (the cross term is of order u**2)
    assert (c.both - c.only_l - c.only_q).abs().max() < 1e-3 * c.both.abs().max()
    head, tail = slice(0, 20), slice(-20, None)
    # rounding Q scales with lambda_i: it dominates the head and vanishes at the tail
    assert c.only_q[head].abs().median() > c.only_l[head].abs().median()
    assert c.only_q[tail].abs().median() < 1e-3 * c.only_l[tail].abs().median()
    # hence the head's TF32 error is a few times the tail's, not the same
    assert 2 < c.both[head].abs().median() / c.both[tail].abs().median() < 5


def test_model_describes_each_contribution(contrib):
    agreement = tm.model_agreement(contrib)
    assert 0.75 < agreement["l_ratio"] < 1.25
    assert 0.75 < agreement["q_ratio"] < 1.25
    # symmetric L (sqrt 2) and non-uniform rounding (~0.74) nearly cancel
    u = tm.TF32_UNIT_ROUNDOFF
    assert 0.65 < contrib.spread_l / (u / math.sqrt(3)) < 0.8
    assert 0.9 < agreement["symmetric_factor"] < 1.15
    expected = math.sqrt(2) * contrib.spread_l * contrib.frobenius / contrib.n
    assert agreement["l_closed"] == pytest.approx(expected)


def test_model_variance_counts_symmetric_pairs_twice(contrib):
    # rounding a symmetric L gives a symmetric error; independent errors on each entry
    # (j, k) would give about half the model's variance off the diagonal
    c = contrib
    assert (c.model_l.median() / (c.spread_l * c.frobenius / c.n)) == pytest.approx(
        math.sqrt(2), rel=0.1
    )


def test_relative_error_slopes(contrib):
    lam = contrib.eigenvalues
    design = torch.stack([lam.log(), torch.ones_like(lam)], 1)
    slope_l = torch.linalg.lstsq(design, (contrib.only_l.abs() / lam).log()[:, None])[0][0]
    slope_q = torch.linalg.lstsq(design, (contrib.only_q.abs() / lam).log()[:, None])[0][0]
    assert -1.1 < float(slope_l) < -0.9 and abs(float(slope_q)) < 0.1


def test_relative_rounding_spread():
    x = torch.tensor([1 + 2**-12, 1.0])
    assert tm.relative_rounding_spread(x) == 2**-12 / math.sqrt((1 + 2**-12) ** 2 + 1)
    assert tm.relative_rounding_spread(torch.tensor([1.0, 2.0])) == 0.0
    with pytest.raises(TypeError, match="float32"):
        tm.relative_rounding_spread(torch.ones(2, dtype=torch.float64))
    with pytest.raises(ValueError, match="nonzero"):
        tm.relative_rounding_spread(torch.zeros(3))


def test_split_error_bounds():
    stats = tm.split_error_stats(samples=1 << 16)
    assert 2.0**-24 < stats["split_max"] <= 2.0**-23
    assert 2.0**-23 < stats["dropped_max"] <= 2.0**-22
    assert 2.0**-26 < stats["dropped_median"] < 2.0**-24
    with pytest.raises(ValueError, match="samples"):
        tm.split_error_stats(samples=1)


def test_mixed_api_check_restores_settings():
    matmul = torch.backends.cuda.matmul
    before = (getattr(matmul, "fp32_precision", None), torch.backends.fp32_precision)
    check = tk.mixed_api_check()
    assert (getattr(matmul, "fp32_precision", None), torch.backends.fp32_precision) == before
    torch.get_float32_matmul_precision()  # coherent again
    if check["has_new_api"]:
        assert check["precision_getter_raises"] and check["allow_tf32_getter_raises"]


def test_env_override_makes_high_the_default():
    assert tk.env_override_check("1")["precision"] == "high"


def test_matvec_is_outside_the_emulator():
    assert tk.matvec_scope_check() == {"mm": 0.0, "mv": 2.0**-12}


def test_conv_emulation_follows_the_cudnn_switch():
    before = torch.backends.cudnn.allow_tf32
    check = tk.conv_emulation_check()
    assert torch.backends.cudnn.allow_tf32 is before  # restored
    assert check == {"cudnn_allow_tf32": True, "rounded": True, "rounded_when_off": False}


def test_diag_audit_finds_the_one_product():
    records = audits.audit_diag_qtlq().records
    assert [r.op for r in records] == ["mm"]
    assert 2.0**-13 < records[0].norm_error < 2.0**-11 and records[0].entry_error > 100


def test_soap_audit_ranks_factor_updates_first():
    records = audits.audit_soap_step().records
    in_update = [any(f[2] == "_update_factors" for f in r.frames) for r in records]
    assert in_update[0] and in_update[1]
    rest = [r.norm_error for r, inside in zip(records, in_update, strict=True) if not inside]
    assert records[1].norm_error > 50 * max(rest)


def test_mlp_audit_is_benign_and_autocast_leaves_nothing():
    records = audits.audit_mlp_step().records
    assert len(records) >= 5 and any(r.phase != "forward" for r in records)
    assert all(2.0**-13 < r.norm_error < 2.0**-11 for r in records)
    assert len(audits.audit_autocast_step()) == 0


def test_audit_rows_name_the_caller_of_a_helper():
    rows = audits.audit_rows(audits.audit_soap_step(), limit=3)
    assert len(rows) == 3 and all(
        set(r) == {"site", "product", "calls", "norm", "entry", "scaled"} for r in rows
    )
    assert rows[0]["site"].startswith("core.py:") and "factor_targets" in rows[0]["site"]
    assert "_mm" not in rows[0]["site"]


def test_published_figures_are_consistent():
    for row in PUBLISHED_THROUGHPUT:
        assert row["tf32_sparse"] == 2 * row["tf32_dense"] and row["fp32"] < row["tf32_dense"]
    a100 = PUBLISHED_THROUGHPUT[0]
    assert a100["fp32"] < OOTOMO_A100_TFLOPS < a100["tf32_dense"] / 3


@pytest.mark.parametrize("module", [tm, tk, audits])
def test_docstring_examples(module):
    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0


def test_env_override_sets_only_the_start_value():
    # on the pinned torch, 'highest' switches the override's TF32 off again
    got = tk.env_override_check("1")
    assert got["precision"] == "high" and got["allow_tf32"] is True
    assert got["allow_tf32_after_highest"] is False
    assert got["fp32_precision_after_highest"] in ("ieee", None)


def test_audit_rows_show_the_error_at_the_row_and_column_scale():
    """The scaled column (entry error over ‖A_i,:‖‖B_:,j‖) stays near 2**-12 where the
    worst-entry column alarms on small entries (issue 19.4): diag(QᵀLQ)'s one product."""
    row = audits.audit_rows(audits.audit_diag_qtlq(n=32))[0]
    assert float(row["entry"]) > 10 and 2.0**-14 < float(row["scaled"]) < 2.0**-11


def test_log_log_slope_is_the_same_number_every_call():
    # tf32_details guards and prints the slopes of its rounding contributions; LAPACK's gelsy
    # (torch.linalg.lstsq's CPU default) gave different last bits for the same 64 points from
    # call to call (other allocations between them), so builds differed.
    g = torch.Generator().manual_seed(0)
    x = torch.rand(64, generator=g) * 1e4 + 1e-3
    y = x**-0.5 * torch.exp(0.1 * torch.randn(64, generator=g))
    seen, held = set(), []
    for i in range(40):
        held.append(torch.empty(13 + 7 * i, dtype=torch.uint8))  # the allocator's state moves
        seen.add(tm.log_log_slope(x, y))
    assert len(seen) == 1, seen
    assert abs(seen.pop() + 0.5) < 0.05
    assert tm.log_log_slope(torch.tensor([1.0, 4.0]), torch.tensor([2.0, 16.0])) == pytest.approx(
        1.5, rel=1e-6
    )


@pytest.mark.parametrize(
    ("x", "y", "match"),
    [
        (torch.ones(3), torch.ones(4), "one shape"),
        (torch.ones(2, 2), torch.ones(2, 2), "1-D"),
        (torch.ones(1), torch.ones(1), "two points"),
        (torch.tensor([1.0, 0.0]), torch.ones(2), "positive"),
        (torch.ones(2), torch.tensor([1.0, float("nan")]), "positive and finite"),
    ],
)
def test_log_log_slope_refuses_what_it_cannot_fit(x, y, match):
    with pytest.raises(ValueError, match=match):
        tm.log_log_slope(x, y)
