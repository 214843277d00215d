"""Sparse and nested tensors pass through emulate_tf32 and tf32_audit (issue 21 item 13)."""

from __future__ import annotations

import warnings

import pytest
import torch

from eigprec.audit import tf32_audit
from eigprec.precision import matmul_precision
from eigprec.tf32 import emulate_tf32


def _x(seed: int, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _nested(layout):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's prototype warning for nested tensors
        return torch.nested.nested_tensor([_x(1, 2, 4), _x(2, 3, 4)], layout=layout)


GRAD_MODES = {
    "grad": torch.enable_grad,
    "no_grad": torch.no_grad,
    "inference": torch.inference_mode,
}


@pytest.mark.parametrize("grad_mode", sorted(GRAD_MODES))
def test_sparse_times_dense_passes_through_untouched(grad_mode):
    sp, d = (_x(3, 4, 4) * (_x(4, 4, 4) > 0.5)).to_sparse(), _x(5, 4, 3)
    want = sp @ d
    with GRAD_MODES[grad_mode]():
        with matmul_precision("high"), emulate_tf32():
            emulated = sp @ d
        with tf32_audit() as report:
            audited = sp @ d
    assert torch.equal(emulated, want) and torch.equal(audited, want)
    assert len(report) == 0


@pytest.mark.parametrize("layout", [torch.strided, torch.jagged])
@pytest.mark.parametrize("grad_mode", sorted(GRAD_MODES))
def test_nested_products_pass_through_untouched(grad_mode, layout):
    nt, w = _nested(layout), _x(6, 4, 5)
    if layout == torch.strided:  # strided nested tensors multiply nested by nested only
        w = torch.nested.nested_tensor([w, w])

    def product():
        return torch.matmul(nt, w)

    want = product()
    with GRAD_MODES[grad_mode]():
        with matmul_precision("high"), emulate_tf32():
            emulated = product()
        with tf32_audit() as report:
            audited = product()
    for got in (emulated, audited):
        assert all(torch.equal(a, b) for a, b in zip(got.unbind(), want.unbind(), strict=True))
    assert len(report) == 0
