"""The audit when ``out=`` or an in-place op overwrites an operand (issue 35, item 5).

The user's result is what torch gives without the audit (for ``mm``/``baddbmm`` with ``out=``
aliasing an operand that is not the unaliased product: BLAS clears the output first); the
audit must measure the operands as they were before the op wrote over them, i.e. record
what it records for the unaliased call.
"""

from __future__ import annotations

import pytest
import torch

from eigprec.audit import tf32_audit


def _randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _only(report):
    (record,) = report.records
    return record


def _audited(call):
    with tf32_audit() as report:
        out = call()
    return out, _only(report)


def _plain(call, *operands):
    # The aliased call without the audit, on fresh copies: what the user gets anyway.
    return call(*(t.clone() for t in operands))


def _same_measures(got, want):
    assert got.shapes == want.shapes
    assert got.norm_error == want.norm_error
    assert got.entry_error == want.entry_error
    assert got.scaled_entry_error == want.scaled_entry_error
    assert got.fp32_norm_error == want.fp32_norm_error


def test_mm_out_aliasing_its_first_operand():
    x, b = _randn(64, 64), _randn(64, 64, seed=1) * 1000
    _, want = _audited(lambda: torch.mm(x, b))
    x2 = x.clone()
    got_out, got = _audited(lambda: torch.mm(x2, b, out=x2))
    assert torch.equal(got_out, _plain(lambda x: torch.mm(x, b, out=x), x))
    _same_measures(got, want)


def test_addmm_in_place_on_an_operand():
    a, b = _randn(32, 32), _randn(32, 32, seed=1)
    _, want = _audited(lambda: torch.addmm(a, a, b))
    a2 = a.clone()
    got_out, got = _audited(lambda: a2.addmm_(a2, b))
    assert torch.equal(got_out, _plain(lambda a: a.addmm_(a, b), a))
    assert got.op == "addmm_"
    _same_measures(got, want)


def test_out_that_is_resized_keeps_the_operand_shapes():
    a, b = _randn(4, 3), _randn(3, 5, seed=1)
    _, want = _audited(lambda: torch.mm(a, b))
    a2 = a.clone()
    with pytest.warns(UserWarning, match="resized"):  # torch's own warning about out=
        got_out, got = _audited(lambda: torch.mm(a2, b, out=a2))
        plain = _plain(lambda a: torch.mm(a, b, out=a), a)
    # Resizing an out= that is also an operand leaves the values undefined (the grown storage
    # is uninitialised: 0 under one allocator, 1e20 under another), so only the shape is
    # compared; the audit's own measures come from the operands before the call.
    assert got_out.shape == plain.shape == (4, 5)
    assert got.shapes == ((4, 3), (3, 5)) == want.shapes
    _same_measures(got, want)


def test_baddbmm_out_aliasing_its_second_operand():
    s, a, b = _randn(2, 8, 8, seed=2), _randn(2, 8, 8), _randn(2, 8, 8, seed=1)
    _, want = _audited(lambda: torch.baddbmm(s, a, b))
    b2 = b.clone()
    got_out, got = _audited(lambda: torch.baddbmm(s, a, b2, out=b2))
    assert torch.equal(got_out, _plain(lambda b: torch.baddbmm(s, a, b, out=b), b))
    _same_measures(got, want)
