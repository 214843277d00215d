"""Solves and inverses under the emulator and the audit (issue 34, items 1 and 3).

On the H200 TF32 changed ``linalg.solve``, ``inv``, ``solve_triangular`` and ``lu_solve`` by
about 1e-4 (blocked algorithms whose GEMM updates follow the matmul switch), while
``cholesky``, ``cholesky_solve``, ``qr``, ``lstsq``, ``eigvalsh`` and ``svdvals`` did not
change. On the CPU these run in LAPACK, out of a dispatch mode's sight: the emulator names
each at run time with the GPU's measured effect, and the audit lists it as run but not
covered. The unchanged ones stay unwarned and bit for bit.
"""

from __future__ import annotations

import warnings

import pytest
import torch

from eigprec import NotEmulatedWarning, emulate_tf32, matmul_precision
from eigprec.audit import tf32_audit

_g = torch.Generator().manual_seed(0)
_A = torch.randn(32, 32, generator=_g) + 8 * torch.eye(32)
_B = torch.randn(32, 3, generator=_g)
_S = _A @ _A.T
_LU = torch.linalg.lu_factor(_A)
_L = torch.linalg.cholesky(_S)

CHANGED = {  # ATen operator named -> call
    "_linalg_solve_ex": lambda: torch.linalg.solve(_A, _B),
    "linalg_inv_ex": lambda: torch.linalg.inv(_A),
    "linalg_solve_triangular": lambda: torch.linalg.solve_triangular(_L, _B, upper=False),
    "linalg_lu_solve": lambda: torch.linalg.lu_solve(*_LU, _B),
    "linalg_lu_factor_ex": lambda: torch.linalg.lu_factor(_A),
}
UNCHANGED = {
    "cholesky": lambda: torch.linalg.cholesky(_S),
    "cholesky_solve": lambda: torch.cholesky_solve(_B, _L),
    "qr": lambda: torch.linalg.qr(_A),
    # (the default driver, gelsy, differs from call to call on this CPU even plainly)
    "lstsq": lambda: torch.linalg.lstsq(_A, _B, driver="gelsd").solution,
    "eigvalsh": lambda: torch.linalg.eigvalsh(_S),
    "svdvals": lambda: torch.linalg.svdvals(_A),
}


def _equal(x, y):
    if isinstance(x, torch.Tensor):
        return torch.equal(x, y)
    return all(_equal(a, b) for a, b in zip(x, y, strict=True))


@pytest.mark.parametrize("op", CHANGED)
def test_emulator_names_solves_with_the_gpus_measured_effect(op):
    plain = CHANGED[op]()
    with matmul_precision("high"), emulate_tf32():
        with pytest.warns(NotEmulatedWarning, match=rf"aten\.{op}\b") as caught:
            got = CHANGED[op]()
    assert _equal(got, plain)  # run unchanged: named, not emulated
    message = str(caught[0].message)
    assert "measured on an H200: relative change ~1e-4" in message
    assert "solve 9.9e-5, inv 8.9e-5, solve_triangular 7.0e-5, lu_solve 9.9e-5" in message
    assert "inv (1.2e-4) and solve_triangular (9.2e-5) changed at n = 1024" in message


@pytest.mark.parametrize("op", CHANGED)
def test_audit_lists_solves_as_run_but_not_covered(op):
    plain = CHANGED[op]()
    with matmul_precision("high"), tf32_audit() as report:
        got = CHANGED[op]()
    assert _equal(got, plain)
    calls, note = report.not_covered[op]
    assert calls == 1 and "H200" in note
    assert f"aten.{op}" in str(report)


@pytest.mark.parametrize("op", CHANGED)
def test_no_warning_where_tf32_would_not_apply(op):
    with warnings.catch_warnings():
        warnings.simplefilter("error", NotEmulatedWarning)
        with matmul_precision("highest"), emulate_tf32():
            CHANGED[op]()
        with matmul_precision("high"), emulate_tf32():  # float64: no TF32 anywhere
            torch.linalg.solve(_A.double(), _B.double())
            torch.linalg.inv(_A.double())
    with matmul_precision("high"), tf32_audit() as report:
        torch.linalg.solve(_A.double(), _B.double())
    assert report.not_covered == {}


@pytest.mark.parametrize("op", UNCHANGED)
@pytest.mark.parametrize("context", [emulate_tf32, tf32_audit])
def test_what_tf32_leaves_alone_is_unwarned_and_bit_for_bit(op, context):
    plain = UNCHANGED[op]()
    with warnings.catch_warnings():
        warnings.simplefilter("error", NotEmulatedWarning)
        with matmul_precision("high"), context() as report:
            got = UNCHANGED[op]()
    assert _equal(got, plain)
    if report is not None:
        assert report.not_covered == {}


def test_solve_backward_is_not_named():
    # The backward of solve runs under NoTF32Guard on a GPU: float32 there, nothing to name.
    a = _A.clone().requires_grad_()
    with matmul_precision("high"), emulate_tf32():
        with pytest.warns(NotEmulatedWarning) as caught:
            x = torch.linalg.solve(a, _B)
        with warnings.catch_warnings():
            warnings.simplefilter("error", NotEmulatedWarning)
            x.sum().backward()
    assert len(caught) == 1
