"""The CuPy bridge reads the solver's per-matrix status on the device (issue 15, item 7).

Without CuPy, a fake ``cupy``/``cupy_backends`` (numpy underneath, column-major like cuSOLVER)
checks the layout reasoning — the transposed read, the swapped triangle, eigenvectors coming
back as rows — and that a nonzero status turns exactly that batch entry into NaN. With CuPy and
a GPU, a real run with one Jacobi sweep must report non-convergence as NaN.
"""

from __future__ import annotations

import sys
import types
from typing import ClassVar

import numpy as np
import pytest
import torch

from eigprec import _cupy_bridge


class _Mem:
    def __init__(self, ptr: int) -> None:
        self.ptr = ptr


class _FakeArray:
    registry: ClassVar[dict[int, np.ndarray]] = {}

    def __init__(self, arr: np.ndarray) -> None:
        self.arr = np.ascontiguousarray(arr)
        self.shape, self.dtype = self.arr.shape, self.arr.dtype
        self.data = _Mem(id(self.arr))
        _FakeArray.registry[id(self.arr)] = self.arr

    def copy(self) -> _FakeArray:
        return _FakeArray(self.arr.copy())


def _fake_modules(fail: set[int]) -> dict[str, types.ModuleType]:
    cupy = types.ModuleType("cupy")
    cupy.float32, cupy.float64, cupy.int32 = np.float32, np.float64, np.int32
    cupy.empty = lambda shape, dtype: _FakeArray(np.full(shape, -7, dtype=dtype))
    cupy.zeros = lambda shape, dtype: _FakeArray(np.zeros(shape, dtype=dtype))
    cuda = types.ModuleType("cupy.cuda")
    device = types.ModuleType("cupy.cuda.device")
    device.get_cusolver_handle = lambda: 0
    cuda.device, cupy.cuda = device, cuda
    cublas = types.ModuleType("cupy_backends.cuda.libs.cublas")
    cublas.CUBLAS_FILL_MODE_LOWER, cublas.CUBLAS_FILL_MODE_UPPER = 0, 1
    cusolver = types.ModuleType("cupy_backends.cuda.libs.cusolver")
    cusolver.CUSOLVER_EIG_MODE_NOVECTOR, cusolver.CUSOLVER_EIG_MODE_VECTOR = 0, 1
    cusolver.createSyevjInfo = lambda: 0
    cusolver.destroySyevjInfo = lambda params: None
    cusolver.xsyevjSetMaxSweeps = lambda params, sweeps: None

    def buffer_size(handle, jobz, uplo, n, a, lda, w, params, batch):
        return 4

    def solve(handle, jobz, uplo, n, a, lda, w, work, lwork, info, params, batch):
        reg = _FakeArray.registry
        for b in range(batch):
            col_major = reg[a][b].T  # how cuSOLVER sees C-ordered memory
            tri = np.triu(col_major) if uplo == 1 else np.tril(col_major)
            S = tri + tri.T - np.diag(np.diag(col_major))
            vals, vecs = np.linalg.eigh(S)
            reg[w][b] = vals
            if jobz == 1:
                reg[a][b] = vecs.T  # column-major V, as C-ordered memory
            reg[info][b] = n + 1 if b in fail else 0

    cusolver.dsyevjBatched_bufferSize = cusolver.ssyevjBatched_bufferSize = buffer_size
    cusolver.dsyevjBatched = cusolver.ssyevjBatched = solve
    libs = types.ModuleType("cupy_backends.cuda.libs")
    libs.cublas, libs.cusolver = cublas, cusolver
    return {
        "cupy": cupy,
        "cupy.cuda": cuda,
        "cupy.cuda.device": device,
        "cupy_backends": types.ModuleType("cupy_backends"),
        "cupy_backends.cuda": types.ModuleType("cupy_backends.cuda"),
        "cupy_backends.cuda.libs": libs,
        "cupy_backends.cuda.libs.cublas": cublas,
        "cupy_backends.cuda.libs.cusolver": cusolver,
    }


@pytest.mark.parametrize("lower", [True, False])
def test_failed_entry_becomes_nan_with_mock_solver(monkeypatch, lower):
    for name, module in _fake_modules(fail={1}).items():
        monkeypatch.setitem(sys.modules, name, module)
    g = torch.Generator().manual_seed(0)
    B = torch.randn(3, 5, 5, generator=g, dtype=torch.float64)
    A = (B + B.mT) / 2
    keep = torch.ones(5, 5, dtype=torch.bool)
    keep = keep.tril() if lower else keep.triu()
    garbled = torch.where(keep, A, torch.full_like(A, 1e3))  # the other triangle is not read
    w, v, info = _cupy_bridge._syevj_batched(_FakeArray(garbled.numpy()), lower, True)
    w_t, V = _cupy_bridge._mark_failures(
        torch.from_numpy(w.arr), torch.from_numpy(v.arr).mT, torch.from_numpy(info.arr)
    )
    assert info.arr.tolist() == [0, 6, 0]
    assert torch.isnan(w_t[1]).all() and torch.isnan(V[1]).all()
    ok = [0, 2]
    torch.testing.assert_close(w_t[ok], torch.linalg.eigvalsh(A[ok]))
    # columns of V are eigenvectors: A V = V diag(w)
    torch.testing.assert_close(A[ok] @ V[ok], V[ok] * w_t[ok][:, None, :])
    w2, v2, _ = _cupy_bridge._syevj_batched(_FakeArray(garbled.numpy()), lower, False)
    assert v2 is None
    torch.testing.assert_close(torch.from_numpy(w2.arr)[ok], w_t[ok])


def test_mark_failures_leaves_successful_entries_untouched():
    w = torch.arange(6.0).reshape(3, 2)
    V = torch.arange(12.0).reshape(3, 2, 2)
    w2, V2 = _cupy_bridge._mark_failures(w, V, torch.tensor([0, 3, -1], dtype=torch.int32))
    assert torch.equal(w2[0], w[0]) and torch.equal(V2[0], V[0])
    assert torch.isnan(w2[1:]).all() and torch.isnan(V2[1:]).all()


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
        w, V = _cupy_bridge._solve(A, True, True, max_sweeps=1)  # one sweep cannot converge
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert torch.isnan(w).all().item() and torch.isnan(V).all().item()
    w, V = _cupy_bridge._solve(A, True, True)
    torch.testing.assert_close(w, torch.linalg.eigvalsh(A), atol=1e-4, rtol=1e-4)
