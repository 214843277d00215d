"""The CuPy bridge's failure test is scale-free and sharp (issue 33, items 2 and 3).

``unconverged`` decides, from the Frobenius invariant ‖A‖_F² = Σ λ_i², whether eigenvalues
can be those of the read triangle. It must not square tiny entries (a valid matrix scaled by
1e-22 in float32 or 1e-160 in float64 came back NaN from ``backend="cupy"`` and ``"auto"``,
value and gradient), and it must pass what converged float32 batched Jacobi returns on a GPU
(its eigenvalue errors, up to ≈ 5 n ulps of max|λ|, are its accuracy) while marking an answer
Jacobi stopped early; LAPACK's own float32/float64 eigenvalues pass at every size and
structure.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import eigprec.eig
from eigprec.eig import cupy_solver as _cupy_bridge
from eigprec.eig import kth_eigvalsh

from ._fake_cupy import FakeCupy, on_fake_gpu


def _symmetric(shape, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    B = torch.randn(*shape, generator=g, dtype=torch.float64)
    return ((B + B.mT) / 2).to(dtype)


def _cupy_everywhere(monkeypatch) -> None:
    """The fake CuPy, with "cupy" and "auto" both resolving to it on CPU tensors."""
    on_fake_gpu(monkeypatch, FakeCupy())
    monkeypatch.setattr(_cupy_bridge, "cupy_available", lambda: True)
    monkeypatch.setattr(eigprec.eig.kth, "_resolve_backend", lambda backend, A, *a, **kw: "cupy")


@pytest.mark.parametrize(("dtype", "scale"), [(torch.float32, 1e-22), (torch.float64, 1e-160)])
def test_tiny_but_valid_matrices_are_solved_through_cupy(monkeypatch, dtype, scale):
    _cupy_everywhere(monkeypatch)
    S = _symmetric((3, 6, 6), torch.float64, seed=5)
    A = (S * scale).to(dtype)
    assert A.abs().amin() > 0  # representable, no entry flushed to zero
    want = torch.linalg.eigvalsh(A.double()) / scale
    w, V = _cupy_bridge.solve(A, True, vectors=True)
    assert torch.isfinite(w).all() and torch.isfinite(V).all()
    rtol = 1e-5 if dtype == torch.float32 else 1e-12
    torch.testing.assert_close(w.double() / scale, want, rtol=rtol, atol=rtol * 4)
    for backend in ("cupy", "auto"):
        X = A.clone().requires_grad_(True)
        lam = kth_eigvalsh(X, -1, backend=backend)
        lam.sum().backward()
        assert torch.isfinite(lam).all(), backend
        torch.testing.assert_close(lam.double() / scale, want[:, -1], rtol=rtol, atol=rtol * 4)
        q = torch.linalg.eigh(A.double()).eigenvectors[..., -1]
        G = (q[..., :, None] * q[..., None, :]).to(dtype)
        torch.testing.assert_close(X.grad, G, rtol=1e-4, atol=1e-4)


def _structured(n: int, dtype: torch.dtype, seed: int) -> dict[str, torch.Tensor]:
    """Matrices whose LAPACK eigenvalues the check must accept (two per kind)."""
    g = torch.Generator().manual_seed(seed)
    B = torch.randn(2, n, n, generator=g, dtype=torch.float64)
    grade = torch.logspace(0, -6, n, dtype=torch.float64)
    eye = torch.eye(n, dtype=torch.float64)
    cycle = 2 * eye - eye.roll(1, 0) - eye.roll(-1, 0)
    mats = {
        "random": (B + B.mT) / 2,
        "rank one": B[..., :1] @ B[..., :1].mT,
        "gram": B[..., : max(1, n // 2)] @ B[..., : max(1, n // 2)].mT,
        "graded": grade[:, None] * (B + B.mT) * grade,
        "cycle laplacian": cycle.expand(2, n, n),
        "shifted": (B + B.mT) / 2 + 100 * eye,  # rounding of every eigenvalue adds up in Σ λ
    }
    return {name: M.to(dtype) for name, M in mats.items()}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("n", [1, 2, 8, 40, 256, 1024])
def test_lapack_eigenvalues_pass_the_check(dtype, n):
    for name, A in _structured(n, dtype, seed=n).items():
        w = torch.linalg.eigvalsh(A)
        assert not _cupy_bridge.unconverged(A, w, True).any(), (name, n)


#: float32 syevjBatched's largest eigenvalue error, relative to max|λ|, over 500 random
#: symmetric matrices (H200, CuPy 14.2, default sweeps: book/data/eig_gpu.json, H200 record of
#: 27 November 2026, ``cupy_solver_status``); the review measured 1.6e-4 at n = 256 and
#: 6.4e-4 at n = 1024 (issue 33). More sweeps do not reduce it: it is converged Jacobi.
JACOBI_DRIFT = {16: 3.37e-6, 32: 5.59e-6, 45: 8.48e-6, 64: 1.23e-5, 100: 1.98e-5, 256: 1.6e-4}


@pytest.mark.parametrize("n", sorted(JACOBI_DRIFT))
def test_converged_float32_jacobi_passes_the_check(n):
    # On the H200 the trace test (3 n + 32 ulps of max|λ|) marked every converged CuPy
    # solve of n >= 32 failed (kth_eigvalsh NaN at 8 x 32 ... 4096 x 128 in the accuracy
    # grid, while cuSOLVER said converged and the eigenvalues were within 2e-5 of float64):
    # Jacobi's errors, independent per eigenvalue, are its accuracy, not a failure. Modelled
    # at their recorded size (every eigenvalue off by up to the largest error measured, in
    # both signs), 500 matrices: none may be marked.
    drift = JACOBI_DRIFT[n]
    A = _symmetric((500 if n <= 100 else 64, n, n), torch.float32, seed=n)
    w = torch.linalg.eigvalsh(A.double())
    g = torch.Generator().manual_seed(1)
    noise = torch.rand(w.shape, generator=g, dtype=torch.float64) * 2 - 1
    jacobi = (w + drift * w.abs().amax(-1, keepdim=True) * noise).float()
    assert not _cupy_bridge.unconverged(A, jacobi, True).any()


@pytest.mark.parametrize("n", [16, 40, 100])
def test_check_marks_jacobi_stopped_after_one_sweep(n):
    # What the failure test is for (H100, n = 40, one sweep allowed: cuSOLVER said info = 0
    # and returned unconverged values). One cyclic Jacobi sweep in float64, done here, leaves
    # off-diagonal mass that no converged answer has: every matrix must be marked.
    A = _symmetric((8, n, n), torch.float32, seed=n)
    swept = _one_jacobi_sweep(A.double())
    w = torch.diagonal(swept, dim1=-2, dim2=-1).sort(-1).values.float()
    assert _cupy_bridge.unconverged(A, w, True).all()


def _one_jacobi_sweep(A: torch.Tensor) -> torch.Tensor:
    A = A.clone()
    n = A.shape[-1]
    for p in range(n - 1):
        for q in range(p + 1, n):
            theta = 0.5 * torch.atan2(2 * A[..., p, q], A[..., q, q] - A[..., p, p])
            c, s = torch.cos(theta)[..., None], torch.sin(theta)[..., None]
            rp, rq = A[..., p, :].clone(), A[..., q, :].clone()  # rows, then columns
            A[..., p, :], A[..., q, :] = c * rp - s * rq, s * rp + c * rq
            cp, cq = A[..., :, p].clone(), A[..., :, q].clone()
            A[..., :, p], A[..., :, q] = c * cp - s * cq, s * cp + c * cq
    return A


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 12),
    exponent=st.integers(-140, 120),
    seed=st.integers(0, 2**16),
    lower=st.booleans(),
)
def test_check_is_scale_free(n, exponent, seed, lower):
    # A power-of-two scale changes no rounding: the decision must not change with it, down to
    # float32's smallest normal numbers (where squaring the entries underflowed) and up to
    # where squaring them overflowed.
    A = _symmetric((3, n, n), torch.float32, seed)
    w = torch.linalg.eigvalsh(A, UPLO="L" if lower else "U")
    base = _cupy_bridge.unconverged(A, w, lower)
    assert not base.any()
    c = 2.0**exponent
    if not (torch.isfinite(A * c).all() and (A * c / c == A).all()):
        return  # the scaled matrix itself is not representable
    assert torch.equal(_cupy_bridge.unconverged(A * c, w * c, lower), base)
    # and an unconverged answer (the diagonal) stays unconverged at every scale
    d = torch.diagonal(A, dim1=-2, dim2=-1).sort(-1).values
    off = (A - torch.diag_embed(torch.diagonal(A, dim1=-2, dim2=-1))).abs().amax((-2, -1)) > 0
    bad = _cupy_bridge.unconverged(A * c, d * c, lower)
    assert torch.equal(bad, _cupy_bridge.unconverged(A, d, lower))
    assert torch.equal(bad, off)


def test_bound_separates_converged_from_stopped_jacobi_in_the_h200_record():
    # The bound is set from this record (CuPy 14.2 on an H200): every converged solve passes,
    # every solve stopped after one sweep that cuSOLVER's own status does not flag is marked
    # (graded matrices aside: one sweep leaves some of them within rounding of converged,
    # under 1 n ulp, which no Frobenius test can tell from a converged answer; 244 of 256 at
    # n = 16 were marked).
    import json
    from pathlib import Path

    rec = json.loads((Path(__file__).parent / "data" / "cupy_convergence_h200.json").read_text())
    rows = rec["rows"]
    converged = [r for r in rows if r["sweeps"] is None]
    stopped = [
        r for r in rows if r["sweeps"] == 1 and r["info_nonzero"] == 0 and r["kind"] != "graded"
    ]
    assert len(converged) >= 40 and len(stopped) >= 15
    for r in converged:
        allowed = _cupy_bridge._FRO_N + _cupy_bridge._FRO_ULPS / r["n"]
        assert r["miss_max_n_ulps"] < allowed, r
    for r in stopped:
        allowed = _cupy_bridge._FRO_N + _cupy_bridge._FRO_ULPS / r["n"]
        assert r["miss_min_n_ulps"] > allowed, r
