"""Small API consistency of the precision and audit entry points (issue 35, items 11-12)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from eigprec import current_matmul_precision, emulate_tf32, matmul_precision
from eigprec.audit import tf32_attribution, tf32_audit
from eigprec.tf32 import round_tf32

from ._precision_state import raw_precision_state


def test_matmul_precision_decorates_a_function():
    before = raw_precision_state()

    @matmul_precision("high")
    def inside():
        return current_matmul_precision()

    assert inside.__name__ == "inside"
    assert inside() == "high" and inside() == "high"  # reusable, as the with form
    assert raw_precision_state() == before


def test_emulate_tf32_decorates_a_function():
    a = torch.tensor([[1 + 2**-11]])
    b = torch.ones(1, 2)  # two columns: a GEMM, rounded by the emulator at 'high'

    @emulate_tf32()
    def product():
        return a @ b

    with matmul_precision("high"):
        assert torch.equal(product(), round_tf32(a) @ b)
    assert torch.equal(a @ b, torch.full((1, 2), 1 + 2**-11))  # nothing left behind


def test_a_decorated_function_that_raises_restores_the_precision():
    before = raw_precision_state()

    @matmul_precision("medium")
    def fails():
        raise KeyError("boom")

    with pytest.raises(KeyError):
        fails()
    assert raw_precision_state() == before


@pytest.mark.parametrize("kind", [np.int64, np.int32, np.uint8])
def test_audit_accepts_numpy_integers(kind):
    a = torch.randn(8, 8)
    with tf32_audit(depth=kind(2), float64_limit=kind(100)) as report:
        a @ a
    (record,) = report.records
    assert record.float64_calls == 0  # 512 multiply-adds > 100: float32 reference
    found = tf32_attribution(lambda: a @ a, depth=kind(2))
    assert len(found.sites) == 1


@pytest.mark.parametrize("bad", [True, np.bool_(True), 2.0, np.float64(2.0)])
def test_audit_still_refuses_bools_and_floats(bad):
    with pytest.raises(TypeError):
        tf32_audit(depth=bad)
    with pytest.raises(TypeError):
        tf32_audit(float64_limit=bad)


# --- item 12: the row·col column --------------------------------------------------------


def test_row_col_column_when_row_norms_overflow_float32():
    # ‖row‖² of 1e20-sized entries overflows float32: the scale read inf and the column 0.0.
    a = torch.full((2, 2), 1e20) * torch.tensor([[1 + 2**-12, 1.0], [1.0, 1.0]])
    b = torch.full((2, 2), 1e-20)
    with tf32_audit() as report:
        a @ b
    (record,) = report.records
    assert record.norm_error > 0
    assert 1e-5 < record.scaled_entry_error < 1e-3  # about 2**-12, as for any GEMM
    assert "0.0e+00" not in report.to_markdown()


def test_row_col_column_with_a_nan_operand_is_not_nan_and_not_ranked_first():
    g = torch.Generator().manual_seed(0)
    a = torch.randn(4, 4, generator=g)
    a[0, 0] = math.nan
    b = torch.randn(4, 4, generator=g)
    c = torch.tensor([[1.0, 1.0], [1.0, 1.0 + 2**-12]])
    with tf32_audit() as report:
        a @ b  # row 0 of the product is NaN in float32 too: left out
        c @ torch.tensor([[1.0], [-1.0]])  # all of it lost to TF32: the worst site
    first, second = report.records
    assert first.shapes == ((2, 2), (2, 1))
    assert math.isfinite(second.scaled_entry_error) and second.scaled_entry_error > 0
    assert all("nan" not in row["TF32 err. (row·col)"] for row in report.rows())


def test_addbmm_is_audited_against_its_summed_row_col_bound():
    # addbmm sums the batch's products: its row·col scale is Σ_b ‖A_b,i,:‖‖B_b,:,j‖, an
    # (i, j) matrix; the per-batch outer products did not broadcast against the result.
    g = torch.Generator().manual_seed(0)
    m, b1, b2 = (torch.randn(*s, generator=g) for s in ((5, 10), (3, 5, 4), (3, 4, 10)))
    plain = torch.addbmm(m, b1, b2)
    with tf32_audit() as report:
        got = torch.addbmm(m, b1, b2)
    assert torch.equal(got, plain)
    (record,) = report.records
    assert record.op == "addbmm" and 0 < record.scaled_entry_error < 1e-3
