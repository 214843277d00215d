"""The CuPy bridge: per-matrix status on the device (issue 15), the hand-off end to end (22).

Without CuPy, the fake in ``tests/_fake_cupy.py`` (numpy underneath, real DLPack, column-major
like cuSOLVER, the bindings' parameter names) checks the layout reasoning — the transposed
read, the swapped triangle, eigenvectors coming back as rows —, that a nonzero status turns
exactly that batch entry into NaN, and ``solve`` end to end: batch shapes, float32/float64,
both triangles, strided input, the empty batch, the stream and the sort order. With CuPy and a
GPU, a real run with one Jacobi sweep must report non-convergence as NaN.
"""

from __future__ import annotations

import warnings

import pytest
import torch

from eigprec.eig import cupy_solver as _cupy_bridge

from ._fake_cupy import FakeCupy, on_fake_gpu


@pytest.mark.parametrize("lower", [True, False])
def test_failed_entry_becomes_nan_with_mock_solver(monkeypatch, lower):
    fake = FakeCupy(fail={1}).install(monkeypatch)
    fake.stream = 0xC0FFEE  # solve's caller puts CuPy on torch's stream
    g = torch.Generator().manual_seed(0)
    B = torch.randn(3, 5, 5, generator=g, dtype=torch.float64)
    A = (B + B.mT) / 2
    keep = torch.ones(5, 5, dtype=torch.bool)
    keep = keep.tril() if lower else keep.triu()
    garbled = torch.where(keep, A, torch.full_like(A, 1e3))  # the other triangle is not read
    w, v, info = _cupy_bridge._syevj_batched(fake.wrap(garbled.numpy()), lower, True)
    w_t, V = _cupy_bridge.mark_failures(
        torch.from_numpy(w.arr), torch.from_numpy(v.arr).mT, torch.from_numpy(info.arr)
    )
    assert info.arr.tolist() == [0, 6, 0]
    assert torch.isnan(w_t[1]).all() and torch.isnan(V[1]).all()
    ok = [0, 2]
    torch.testing.assert_close(w_t[ok], torch.linalg.eigvalsh(A[ok]))
    # columns of V are eigenvectors: A V = V diag(w)
    torch.testing.assert_close(A[ok] @ V[ok], V[ok] * w_t[ok][:, None, :])
    w2, v2, _ = _cupy_bridge._syevj_batched(fake.wrap(garbled.numpy()), lower, False)
    assert v2 is None
    torch.testing.assert_close(torch.from_numpy(w2.arr)[ok], w_t[ok])


def test_mark_failures_leaves_successful_entries_untouched():
    w = torch.arange(6.0).reshape(3, 2)
    V = torch.arange(12.0).reshape(3, 2, 2)
    w2, V2 = _cupy_bridge.mark_failures(w, V, torch.tensor([0, 3, -1], dtype=torch.int32))
    assert torch.equal(w2[0], w[0]) and torch.equal(V2[0], V[0])
    assert torch.isnan(w2[1:]).all() and torch.isnan(V2[1:]).all()


def _symmetric(shape, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    B = torch.randn(*shape, generator=g, dtype=dtype)
    return (B + B.mT) / 2


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("batch_shape", [(), (3,), (2, 3)])
def test_solve_end_to_end_through_fake_cupy_and_dlpack(monkeypatch, dtype, lower, batch_shape):
    fake = FakeCupy()
    on_fake_gpu(monkeypatch, fake)
    n = 5
    A = _symmetric((*batch_shape, n, n), dtype, seed=len(batch_shape))
    keep = torch.ones(n, n, dtype=torch.bool)
    keep = keep.tril() if lower else keep.triu()
    garbled = torch.where(keep, A, torch.full_like(A, 1e3))  # the other triangle is not read
    before = garbled.clone()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # e.g. CuPy 14's ExternalStream deprecation
        w, V = _cupy_bridge.solve(garbled, lower, vectors=True)
        w_only, none = _cupy_bridge.solve(garbled, lower, vectors=False)
    assert none is None and torch.equal(garbled, before)  # the solver got a copy
    assert w.shape == (*batch_shape, n) and V.shape == (*batch_shape, n, n)
    assert w.dtype == V.dtype == dtype
    tol = {"atol": 1e-5, "rtol": 1e-5} if dtype == torch.float32 else {}
    torch.testing.assert_close(w, torch.linalg.eigvalsh(A), **tol)
    torch.testing.assert_close(w_only, w)
    torch.testing.assert_close(A @ V, V * w[..., None, :], **tol)  # columns are eigenvectors
    eye = torch.eye(n, dtype=dtype).expand_as(V)
    torch.testing.assert_close(V.mT @ V, eye, **tol)
    # Every solve ran on torch's stream, inside the device, with ascending order set.
    assert [(s["stream"], s["device"], s["sort_eig"]) for s in fake.solves] == [
        (0xC0FFEE, 0, 1)
    ] * 2
    assert all(not p["alive"] for p in fake.params.values())  # destroyed after use
    prefix = "s" if dtype == torch.float32 else "d"
    assert {c[0].rsplit(".", 1)[-1] for c in fake.calls} >= {f"{prefix}syevjBatched"}


def test_solve_strided_and_empty_batches(monkeypatch):
    fake = FakeCupy()
    on_fake_gpu(monkeypatch, fake)
    A = _symmetric((4, 6, 6), torch.float64, seed=3)
    strided = A[::2]  # every other matrix: not contiguous
    assert not strided.is_contiguous()
    w, V = _cupy_bridge.solve(strided, True, vectors=True)
    torch.testing.assert_close(w, torch.linalg.eigvalsh(strided))
    torch.testing.assert_close(strided @ V, V * w[..., None, :])
    wt, _ = _cupy_bridge.solve(A.mT, False, vectors=True)  # a transposed view
    torch.testing.assert_close(wt, torch.linalg.eigvalsh(A))
    empty = torch.empty(0, 6, 6, dtype=torch.float32)
    w0, V0 = _cupy_bridge.solve(empty, True, vectors=True)
    assert w0.shape == (0, 6) and V0.shape == (0, 6, 6)
    assert len(fake.solves) == 2  # no solver call for the empty batch
    w1, _ = _cupy_bridge.solve(torch.full((2, 1, 1), 4.0), True, vectors=True)  # n = 1
    assert w1.tolist() == [[4.0], [4.0]]


def test_solve_takes_tensors_that_require_grad(monkeypatch):
    # Inside kth_eigvalsh's custom op the input still has requires_grad set, and DLPack
    # refuses to export such a tensor (BufferError): found by the recorder's fake-CuPy run.
    on_fake_gpu(monkeypatch, FakeCupy())
    A = _symmetric((3, 4, 4), torch.float64, seed=2).requires_grad_(True)
    with torch.no_grad():
        w, V = _cupy_bridge.solve(A, True, vectors=True)
    torch.testing.assert_close(w, torch.linalg.eigvalsh(A.detach()))
    assert not w.requires_grad and not V.requires_grad


def test_solve_non_convergence_is_nan_through_fake(monkeypatch):
    on_fake_gpu(monkeypatch, FakeCupy(fail={0}))
    A = _symmetric((2, 4, 4), torch.float32, seed=1)
    w, V = _cupy_bridge.solve(A, True, vectors=True)
    assert torch.isnan(w[0]).all() and torch.isnan(V[0]).all()
    assert not torch.isnan(w[1]).any()


@pytest.mark.parametrize("lower", [True, False])
def test_unconverged_eigenvalues_with_info_zero_become_nan(monkeypatch, lower):
    # On an H100 (CUDA 13, CuPy 14.2) syevjBatched stopped after the one sweep allowed and
    # reported info 0, returning the unconverged diagonal as eigenvalues: info alone does
    # not flag non-convergence. The fake does the same; the bridge must still answer NaN.
    fake = FakeCupy()
    on_fake_gpu(monkeypatch, fake)
    A = _symmetric((3, 12, 12), torch.float32, seed=4)
    keep = torch.ones(12, 12, dtype=torch.bool)
    keep = keep.tril() if lower else keep.triu()
    garbled = torch.where(keep, A, torch.full_like(A, 1e3))  # the other triangle is not read
    w, V = _cupy_bridge.solve(garbled, lower, True, max_sweeps=1)
    assert torch.isnan(w).all() and torch.isnan(V).all()
    # Converged results pass the same check, at every size and in both precisions.
    for n, dtype in [
        (1, torch.float32),
        (2, torch.float64),
        (12, torch.float32),
        (40, torch.float32),
    ]:
        B = _symmetric((2, n, n), dtype, seed=n)
        read = torch.ones(n, n, dtype=torch.bool)
        read = read.tril() if lower else read.triu()
        w, V = _cupy_bridge.solve(torch.where(read, B, 1e3), lower, True)
        torch.testing.assert_close(w, torch.linalg.eigvalsh(B), atol=1e-5, rtol=1e-5)


def test_solve_refuses_cuda_graph_capture(monkeypatch):
    fake = FakeCupy()
    on_fake_gpu(monkeypatch, fake)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    with pytest.raises(RuntimeError, match="CUDA graph is being captured"):
        _cupy_bridge.solve(_symmetric((2, 3, 3), torch.float32, 0), True, vectors=False)
    assert fake.calls == []  # refused before any CuPy work


@pytest.mark.parametrize(
    ("cuda", "package"),
    [("13.0", "cupy-cuda13x"), ("12.8", "cupy-cuda12x"), (None, "cupy-cuda13x")],
)
def test_install_hint_follows_torch_cuda_major(monkeypatch, cuda, package):
    monkeypatch.setattr(torch.version, "cuda", cuda)
    assert _cupy_bridge.cupy_package() == package
    assert package in _cupy_bridge.install_hint()


@pytest.mark.skipif(
    not (torch.cuda.is_available() and _cupy_bridge.cupy_available()),
    reason="needs a CUDA device and CuPy",
)
def test_real_non_convergence_is_nan_without_host_sync():
    g = torch.Generator().manual_seed(0)
    B = torch.randn(8, 40, 40, generator=g).cuda()
    A = (B + B.mT) / 2
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        # One sweep cannot converge. On an H100 (CUDA 13, CuPy 14.2) the solver still
        # reported info 0 here; the bridge's own check must turn the result into NaN.
        w, V = _cupy_bridge.solve(A, True, True, max_sweeps=1)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert torch.isnan(w).all().item() and torch.isnan(V).all().item()
    w, V = _cupy_bridge.solve(A, True, True)
    torch.testing.assert_close(w, torch.linalg.eigvalsh(A), atol=1e-4, rtol=1e-4)
