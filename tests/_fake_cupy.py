"""A fake CuPy for CPU tests of the CuPy bridge: numpy underneath, real DLPack, cuSOLVER's rules.

The fake's functions carry the parameter names of CuPy 14.2's bindings
(``tests/data/cupy_signatures.json``; ``tests/test_cupy_signatures.py`` holds them to it).
Memory is addressed by real pointers: ``cupy.from_dlpack`` shares the torch tensor's memory
through DLPack, and the solver finds its arrays by ``data.ptr`` and writes through them as
cuSOLVER would, reading C-ordered memory column-major. It checks what the real library
would trip on or silently get wrong: the precision prefix against the dtype, ``lda``, the
workspace size in elements, the info array, a live params object, the stream the handle is
bound to (CuPy binds it to its current stream on every call).
"""

from __future__ import annotations

import types
from typing import Any

import numpy as np

#: cuSOLVER documents info = n + 1 for a matrix on which Jacobi did not converge (``fail``).
NOT_CONVERGED = 1


def _jacobi_sweeps(S: np.ndarray, sweeps: int) -> tuple[np.ndarray, np.ndarray]:
    """``sweeps`` cyclic Jacobi sweeps: the (unconverged) diagonal and the rotations' product."""
    M, n = S.copy(), len(S)
    V = np.eye(n)
    for _ in range(sweeps):
        for p in range(n - 1):
            for q in range(p + 1, n):
                if M[p, q] == 0:
                    continue
                theta = (M[q, q] - M[p, p]) / (2 * M[p, q])
                t = (1.0 if theta >= 0 else -1.0) / (abs(theta) + np.hypot(theta, 1.0))
                c = 1 / np.hypot(t, 1.0)
                J = np.eye(n)
                J[p, p] = J[q, q] = c
                J[p, q], J[q, p] = t * c, -t * c
                M, V = J.T @ M @ J, V @ J
    return np.diag(M).copy(), V


class _Mem:
    def __init__(self, ptr: int) -> None:
        self.ptr = ptr


class FakeCupy:
    """One fake CuPy installation: modules, a pointer registry and a log of every call.

    Args:
        fail: batch entries for which the solver reports non-convergence.
    """

    def __init__(self, fail: set[int] | frozenset[int] = frozenset()) -> None:
        self.fail = set(fail)
        self.arrays: dict[int, Any] = {}
        self.calls: list[tuple[str, tuple, dict]] = []
        self.stream: int | None = None  # CuPy's current stream (None: the default)
        self.device: int | None = None
        self.params: dict[int, dict[str, Any]] = {}
        self.solves: list[dict[str, Any]] = []
        self.modules = self._build()

    # ------------------------------------------------------------------ arrays
    def wrap(self, arr: np.ndarray) -> Any:
        fake = self

        class FakeArray:
            def __init__(self, a: np.ndarray) -> None:
                self.arr = a
                self.shape, self.dtype = a.shape, a.dtype
                self.data = _Mem(a.ctypes.data if a.size else id(a))
                fake.arrays[self.data.ptr] = self

            def copy(self) -> Any:
                return FakeArray(self.arr.copy())

            def __dlpack__(self, **kwargs: Any) -> Any:
                return self.arr.__dlpack__(**{k: v for k, v in kwargs.items() if k != "stream"})

            def __dlpack_device__(self) -> Any:
                return self.arr.__dlpack_device__()

        return FakeArray(arr)

    def _array(self, ptr: int, what: str) -> np.ndarray:
        if ptr not in self.arrays:
            raise AssertionError(f"{what}: pointer {ptr:#x} is no array this fake allocated")
        return self.arrays[ptr].arr

    def _log(self, name: str, *args: Any, **kwargs: Any) -> None:
        self.calls.append((name, args, kwargs))

    # ------------------------------------------------------------------ modules
    def _build(self) -> dict[str, types.ModuleType]:
        fake = self
        cupy = types.ModuleType("cupy")
        cupy.float32, cupy.float64, cupy.int32 = np.float32, np.float64, np.int32

        def empty(shape, dtype=float, order="C"):
            fake._log("cupy.empty", shape, dtype, order)
            poison = -7 if np.dtype(dtype).kind in "iu" else np.nan
            return fake.wrap(np.full(shape, poison, dtype=dtype, order=order))

        def zeros(shape, dtype=float, order="C"):
            fake._log("cupy.zeros", shape, dtype, order)
            return fake.wrap(np.zeros(shape, dtype=dtype, order=order))

        def from_dlpack(array, *, device=None, copy=None):
            fake._log("cupy.from_dlpack", array, device=device, copy=copy)
            return fake.wrap(np.from_dlpack(array))

        cupy.empty, cupy.zeros, cupy.from_dlpack = empty, zeros, from_dlpack

        class Device:
            def __init__(self, device=None):
                fake._log("cupy.cuda.Device", device)
                self.id, self.before = device, None

            def __enter__(self):
                self.before, fake.device = fake.device, self.id
                return self

            def __exit__(self, *exc):
                fake.device = self.before

            def synchronize(self):
                fake._log("cupy.cuda.Device.synchronize")

        class Stream:
            def __init__(self, ptr: int) -> None:
                self.ptr, self.before = ptr, None

            @classmethod
            def from_external(cls, obj):
                fake._log("cupy.cuda.Stream.from_external", obj)
                proto = getattr(obj, "__cuda_stream__", None)
                if proto is None:
                    raise TypeError("the object does not implement __cuda_stream__")
                got = proto()
                if not (isinstance(got, tuple) and len(got) == 2):
                    raise TypeError("__cuda_stream__ must return a 2-tuple")
                return cls(got[1])

            def __enter__(self):
                self.before, fake.stream = fake.stream, self.ptr
                return self

            def __exit__(self, *exc):
                fake.stream = self.before

        cuda = types.ModuleType("cupy.cuda")
        cuda.Device, cuda.Stream = Device, Stream
        device = types.ModuleType("cupy.cuda.device")

        def get_cusolver_handle():
            fake._log("cupy.cuda.device.get_cusolver_handle")
            return 0x50  # a handle; CuPy binds it to the current stream on each call

        device.get_cusolver_handle = get_cusolver_handle
        runtime = types.ModuleType("cupy.cuda.runtime")

        def getDeviceCount():
            fake._log("cupy.cuda.runtime.getDeviceCount")
            return 1

        runtime.getDeviceCount = getDeviceCount
        cuda.device, cuda.runtime, cupy.cuda = device, runtime, cuda

        cublas = types.ModuleType("cupy_backends.cuda.libs.cublas")
        cublas.CUBLAS_FILL_MODE_LOWER, cublas.CUBLAS_FILL_MODE_UPPER = 0, 1
        cusolver = types.ModuleType("cupy_backends.cuda.libs.cusolver")
        cusolver.CUSOLVER_EIG_MODE_NOVECTOR, cusolver.CUSOLVER_EIG_MODE_VECTOR = 0, 1
        prefix = "cupy_backends.cuda.libs.cusolver."

        def createSyevjInfo():
            fake._log(prefix + "createSyevjInfo")
            params = 0x1000 + len(fake.params)
            fake.params[params] = {"alive": True, "sort_eig": None, "max_sweeps": None}
            return params

        def _live(info):
            if not fake.params.get(info, {}).get("alive"):
                raise AssertionError(f"params {info!r} is not a live syevjInfo")
            return fake.params[info]

        def destroySyevjInfo(info):
            fake._log(prefix + "destroySyevjInfo", info)
            _live(info)["alive"] = False

        def xsyevjSetSortEig(info, sort_eig):
            fake._log(prefix + "xsyevjSetSortEig", info, sort_eig)
            _live(info)["sort_eig"] = sort_eig

        def xsyevjSetMaxSweeps(info, max_sweeps):
            fake._log(prefix + "xsyevjSetMaxSweeps", info, max_sweeps)
            _live(info)["max_sweeps"] = max_sweeps

        def xsyevjSetTolerance(info, tolerance):
            fake._log(prefix + "xsyevjSetTolerance", info, tolerance)
            _live(info)["tolerance"] = tolerance

        def _buffer(dtype):
            def size(handle, jobz, uplo, n, A, lda, W, params, batchSize):
                fake._log(prefix + f"{'s' if dtype == np.float32 else 'd'}syevjBatched_bufferSize",
                          handle, jobz, uplo, n, A, lda, W, params, batchSize)  # fmt: skip
                _live(params)
                return 3 * n * n * batchSize + 1  # elements, not bytes

            return size

        def _solver(dtype):
            name = f"{'s' if dtype == np.float32 else 'd'}syevjBatched"

            def solve(handle, jobz, uplo, n, A, lda, W, work, lwork, info, params, batchSize):
                fake._log(prefix + name, handle, jobz, uplo, n, A, lda, W, work, lwork, info,
                          params, batchSize)  # fmt: skip
                state = _live(params)
                a = fake._array(A, "A")
                w, wk, inf = (
                    fake._array(W, "W"),
                    fake._array(work, "work"),
                    fake._array(info, "info"),
                )
                assert a.dtype == dtype == w.dtype == wk.dtype, f"{name} on {a.dtype}"
                assert a.shape == (batchSize, n, n) and a.flags.c_contiguous
                assert lda == n and w.shape == (batchSize, n)
                assert wk.size >= lwork, "workspace smaller than lwork elements"
                assert inf.dtype == np.int32 and inf.shape == (batchSize,)
                assert fake.stream is not None, "solver queued on CuPy's default stream"
                fake.solves.append({"stream": fake.stream, "device": fake.device, **state})
                for b in range(batchSize):
                    col_major = a[b].T  # how cuSOLVER reads C-ordered memory
                    tri = np.triu(col_major) if uplo == 1 else np.tril(col_major)
                    S = (tri + tri.T - np.diag(np.diag(col_major))).astype(np.float64)
                    if state["max_sweeps"] is not None and state["max_sweeps"] < 5:
                        # What real syevjBatched did on an H100 (CUDA 13, CuPy 14.2; n = 40,
                        # one sweep): it stopped after the sweeps allowed and reported info 0
                        # with the unconverged diagonal, sorted, as the eigenvalues.
                        vals, vecs = _jacobi_sweeps(S, state["max_sweeps"])
                        order = np.argsort(vals)
                        vals, vecs = vals[order], vecs[:, order]
                    else:
                        vals, vecs = np.linalg.eigh(S)
                    w[b] = vals
                    if jobz == 1:
                        a[b] = vecs.T  # column-major V, as C-ordered memory
                    inf[b] = n + NOT_CONVERGED if b in fake.fail else 0

            return solve

        cusolver.createSyevjInfo, cusolver.destroySyevjInfo = createSyevjInfo, destroySyevjInfo
        cusolver.xsyevjSetSortEig, cusolver.xsyevjSetMaxSweeps = (
            xsyevjSetSortEig,
            xsyevjSetMaxSweeps,
        )
        cusolver.xsyevjSetTolerance = xsyevjSetTolerance
        cusolver.ssyevjBatched_bufferSize = _buffer(np.float32)
        cusolver.dsyevjBatched_bufferSize = _buffer(np.float64)
        cusolver.ssyevjBatched, cusolver.dsyevjBatched = _solver(np.float32), _solver(np.float64)
        libs = types.ModuleType("cupy_backends.cuda.libs")
        libs.cublas, libs.cusolver = cublas, cusolver
        backends = types.ModuleType("cupy_backends")
        backends_cuda = types.ModuleType("cupy_backends.cuda")
        backends.cuda, backends_cuda.libs = backends_cuda, libs
        cupyx = types.ModuleType("cupyx")
        errors = {"linalg": "ignore"}  # CuPy's default: no check of the solver's status

        class errstate:
            def __init__(self, linalg=None):
                self.linalg, self.before = linalg, None

            def __enter__(self):
                self.before, errors["linalg"] = errors["linalg"], self.linalg

            def __exit__(self, *exc):
                errors["linalg"] = self.before

        cupyx.errstate, cupyx.geterr = errstate, lambda: dict(errors)
        linalg = types.ModuleType("cupy.linalg")

        def eigh(a, UPLO="L"):
            fake._log("cupy.linalg.eigh", a, UPLO)
            if fake.fail and errors["linalg"] == "raise":
                raise np.linalg.LinAlgError("Error reported by syevjBatched in cuSOLVER")
            return None

        linalg.eigh, cupy.linalg = eigh, linalg
        return {
            "cupy": cupy,
            "cupy.linalg": linalg,
            "cupyx": cupyx,
            "cupy.cuda": cuda,
            "cupy.cuda.device": device,
            "cupy.cuda.runtime": runtime,
            "cupy_backends": backends,
            "cupy_backends.cuda": backends_cuda,
            "cupy_backends.cuda.libs": libs,
            "cupy_backends.cuda.libs.cublas": cublas,
            "cupy_backends.cuda.libs.cusolver": cusolver,
        }

    def resolve(self, dotted: str) -> Any:
        """The fake object named ``dotted`` (as in the signature table)."""
        parts = dotted.split(".")
        for cut in range(len(parts), 0, -1):
            module = self.modules.get(".".join(parts[:cut]))
            if module is not None:
                obj = module
                for attr in parts[cut:]:
                    obj = getattr(obj, attr)
                return obj
        raise KeyError(dotted)

    def install(self, monkeypatch: Any) -> FakeCupy:
        """Put the fake modules in ``sys.modules`` for one test."""
        import sys

        for name, module in self.modules.items():
            monkeypatch.setitem(sys.modules, name, module)
        return self


class TorchStream:
    """Stands in for ``torch.cuda.current_stream(device)`` on a CPU-only machine."""

    def __init__(self, handle: int = 0xC0FFEE) -> None:
        self.cuda_stream = handle


def on_fake_gpu(monkeypatch: Any, fake: FakeCupy, handle: int = 0xC0FFEE) -> None:
    """Install ``fake`` and give torch a current stream and device, as on a GPU machine."""
    import torch

    fake.install(monkeypatch)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: TorchStream(handle))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
