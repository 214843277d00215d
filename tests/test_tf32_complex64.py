"""complex64 products are a documented gap (issue 47, item 7): whether a TF32 GPU rounds their
operands is not measured yet, so the emulator runs them unchanged and says so once per block
(NotEmulatedWarning), the audit lists them as run but not covered, and the API page names the
gap. Complex convolutions are three float32 convolutions in ATen, emulated as such."""

from __future__ import annotations

import warnings

import pytest
import torch

from eigprec import NotEmulatedWarning, emulate_tf32, matmul_precision, tf32_audit

from .conftest import ROOT

g = torch.Generator().manual_seed(0)
A = torch.randn(4, 4, dtype=torch.complex64, generator=g)
B = torch.randn(2, 4, 4, dtype=torch.complex64, generator=g)


def _products():
    return [A @ A, torch.bmm(B, B), torch.nn.functional.linear(A, A), torch.addmm(A, A, A)]


def test_a_complex64_product_warns_once_per_block_and_runs_unchanged():
    with matmul_precision("highest"):
        plain = _products()
    with matmul_precision("high"), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with emulate_tf32():
            got = _products() + _products()
    assert all(torch.equal(a, b) for a, b in zip(plain * 2, got, strict=True))
    named = [w for w in caught if issubclass(w.category, NotEmulatedWarning)]
    # one per operator and block: mm (A @ A and linear without bias), bmm, addmm
    assert sorted(str(w.message).split()[1] for w in named) == [
        "aten.addmm",
        "aten.bmm",
        "aten.mm",
    ]
    assert all("complex64" in str(w.message) and "not measured" in str(w.message) for w in named)


def test_silent_where_tf32_would_not_apply():
    with warnings.catch_warnings():
        warnings.simplefilter("error", NotEmulatedWarning)
        with matmul_precision("highest"), emulate_tf32():
            _products()
        with matmul_precision("high"), emulate_tf32():
            A @ A[:, 0]  # matrix @ vector: no TF32 on a GPU
            A[0] @ A  # vector @ matrix: float32 on the measured GPUs
            A.to(torch.complex128) @ A.to(torch.complex128)


def test_complex_convolutions_are_float32_convolutions_and_emulated():
    x = torch.full((1, 1, 3, 3), 1 + 2**-12, dtype=torch.complex64)
    w = torch.ones(1, 1, 1, 1, dtype=torch.complex64)
    with matmul_precision("highest"), emulate_tf32(convolutions=True):
        out = torch.nn.functional.conv2d(x, w)
    assert torch.all(out.real == 1.0)  # the 2**-12 rounded away: a TF32 convolution


def test_the_audit_lists_complex64_products_as_not_covered():
    with tf32_audit() as report:
        _products()
    assert len(report) == 0
    covered = report.not_covered
    assert {k for k in covered if "complex64" in k} == {
        "mm[complex64]",
        "bmm[complex64]",
        "addmm[complex64]",
    }
    assert covered["mm[complex64]"][0] == 2
    assert "not measured" in covered["mm[complex64]"][1]
    assert "mm[complex64]" in report.to_text()


@pytest.mark.parametrize("page", ["api.md"])
def test_the_api_page_names_the_gap(page):
    text = (ROOT / "book" / page).read_text()
    assert "complex64" in text and "NotEmulatedWarning" in text
