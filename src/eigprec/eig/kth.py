"""The entry point :func:`kth_eigvalsh`: arguments checked, a solver chosen per shape.

Where ``method="auto"`` resolves to torch's own solver the call is a thin wrapper: a few
Python checks, one finiteness screen of the batch, then ``torch.linalg.eigvalsh`` and
torch's own autograd (:func:`_thin`). Everything else runs the custom ops and the
``autograd.Function`` of :mod:`eigprec.eig.ops`. What is decided where — NaN entries, what is
kept for the backward pass, threads, transforms, ``torch.compile``, half precision, complex
input, the GPU backends — is on the API page (book/api.md, "The k-th eigenvalue: decided
behaviour").
"""

from __future__ import annotations

import functools
import math
import numbers
import operator
import re
from typing import Literal

import numpy as np
import torch
import torch.autograd.forward_ad as _fwAD
from torch import Tensor
from torch._C import _functorch

from eigprec.eig import auto, cupy_solver, lapack
from eigprec.eig.ops import (
    KthEigvalsh,
    apply_eager,
    factor_impl,
    factor_op,
    isolated,
    value_impl,
    value_op,
)
from eigprec.eig.tolerance import default_cluster_tol

__all__ = ["default_cluster_tol", "kth_eigvalsh"]

Backend = Literal["auto", "torch", "cupy"]
Method = Literal["auto", "eigh", "subset", "inverse_iteration"]
Subgradient = Literal["eigenvector", "mean"]

_BACKENDS = ("auto", "torch", "cupy")
_METHODS = ("auto", "eigh", "subset", "inverse_iteration")
_SUBGRADIENTS = ("eigenvector", "mean")
_MAX_STEPS = 1000
_F32, _F64 = torch.float32, torch.float64
# torch.linalg.eigh on CUDA before torch 2.12 reaches cuSOLVER's batched solver only for
# n <= 32 and loops over the batch above (pytorch issue 175585); from 2.12 it batches every n
# (pytorch PR 175403, in the 2.12 release notes; not measured here). Only in the first case
# is CuPy's batched solver known to help, so only there does "auto" pick CuPy.
_TORCH_BATCHES_EVERY_N = (2, 12)


# --------------------------------------------------------------------------- the thin path


def _thin(A: Tensor, k: int, lower: bool, backend: str, mean: bool) -> Tensor | None:
    """λ_k where ``method="auto"`` runs torch's own solver or the subset driver, else None.

    The common call, cheaply: ``A`` a plain float32/float64 CPU or CUDA tensor, ``k`` an int in
    range, no ``torch.compile`` tracing, ``torch.func`` transform or forward-mode level active
    (those take the general path, whose validation gives the error messages). The value comes
    from ``torch.linalg.eigvalsh``, and its gradient from torch's own backward of ``eigh``,
    which is the q qᵀ of ``subgradient="eigenvector"``. A batch that is not finite goes to the
    general path, which masks the bad entries; the screen reads the input, because LAPACK
    returned finite eigenvalues for matrices holding NaN (``tests/test_eig.py``). On the CPU,
    no-gradient calls that the subset driver answers faster
    (``eigprec.eig.auto.cpu_uses_subset``) run it directly, screened in NumPy.
    ``mean``: ``subgradient="mean"`` with the default rule, whose value is the same and whose
    gradient is q qᵀ wherever λ_k is a cluster of one — on the CPU, checked on the computed
    eigenvalues after torch's ``eigh``; a cluster of more goes to the general path.
    """
    dtype = A.dtype
    if dtype is not _F32 and dtype is not _F64:
        return None
    shape = A.shape
    if len(shape) < 2:
        return None
    n = shape[-1]
    if shape[-2] != n or not -n <= k < n or A.layout is not torch.strided:
        return None
    # Compiling first: dynamo folds it, and cannot trace the functorch query after it.
    if torch.compiler.is_compiling() or _functorch.is_functorch_wrapped_tensor(A):
        return None
    if _fwAD._current_level >= 0:  # dual tensors: the general path carries the tangent
        return None
    grad = A.requires_grad and torch.is_grad_enabled()
    if mean and grad:
        if not A.is_cpu or not math.isfinite(A.detach().sum().tolist()):
            return None
        w = torch.linalg.eigh(A, "L" if lower else "U").eigenvalues
        return w[..., k] if isolated(w, k % n, math.nan) else None
    if A.is_cpu:
        if auto.cpu_uses_subset(n, A.numel() // (n * n), grad):
            if grad or not _scipy_ok():
                return None
            a = (A.detach() if A.requires_grad else A).numpy()
            # Screened in NumPy: a torch operator between NumPy and SciPy calls cost more.
            if not lapack.all_finite(a):
                return None
            return lapack.solve(a, k % n, lower, vectors=False)[0]
    elif not A.is_cuda or (backend == "auto" and _resolve_backend("auto", A) != "torch"):
        return None
    # One reduction screens the batch: NaN and Inf propagate through a sum, and an overflow
    # only sends the call down the general path. (On CUDA it synchronises, as
    # torch.linalg.eigvalsh does anyway to check its solver's status.) Checking the values
    # instead would not do: LAPACK returned finite eigenvalues for matrices holding NaN.
    if not math.isfinite((A.detach() if grad else A).sum().tolist()):  # tolist: no operator
        return None
    return torch.linalg.eigvalsh(A, "L" if lower else "U")[..., k]


# --------------------------------------------------------------------------- checks


def _as_index(value: object, name: str) -> int:
    """``value`` as an int: Python and NumPy integers and 0-d integer tensors, nothing else.

    ``operator.index`` alone also takes a bool tensor (as 1) and one-element tensors of any
    shape, which would let ``k=torch.tensor(True)`` through where ``k=True`` is refused.
    """
    # Under torch.compile(dynamic=True) k may be symbolic: dynamo calls it an int, and
    # hasattr(k, "__index__") breaks the graph, so ints are accepted before asking.
    if isinstance(value, int | torch.SymInt) and not isinstance(value, bool):
        return value  # type: ignore[return-value]
    what = type(value).__name__
    if isinstance(value, Tensor | np.ndarray):
        what = f"{what} of shape {tuple(value.shape)} and dtype {value.dtype}"
        ok = value.ndim == 0 and (
            value.dtype not in (torch.bool, np.bool_)
            and not (value.dtype.is_floating_point or value.dtype.is_complex)
            if isinstance(value, Tensor)
            else value.dtype.kind in "iu"
        )
    else:
        ok = not isinstance(value, bool | np.bool_) and hasattr(value, "__index__")
    if not ok:
        raise TypeError(
            f"kth_eigvalsh: {name} must be an int (Python or NumPy integer, or a 0-d integer "
            f"tensor), got {what}"
        )
    return operator.index(value)


def _validate(
    A: object,
    k: object,
    lower: object,
    backend: str,
    method: str,
    subgradient: str,
    cluster_tol,
    steps,
    cluster_rtol=None,
) -> int:
    """Every argument checked once, before any work; returns k as a non-negative index."""
    if not isinstance(A, Tensor):
        raise TypeError(f"kth_eigvalsh: A must be a torch.Tensor, got {type(A).__name__}")
    if A.layout != torch.strided:
        raise TypeError(
            f"kth_eigvalsh: A must be a dense (strided) tensor, got a sparse one ({A.layout}); "
            "call A.to_dense() first"
        )
    if A.device.type == "meta":
        raise ValueError("kth_eigvalsh: A is on the meta device (no data to decompose)")
    if A.dim() < 2:
        raise ValueError(
            f"kth_eigvalsh: A must have at least 2 dimensions, got shape {tuple(A.shape)}"
        )
    if A.shape[-1] != A.shape[-2]:
        raise ValueError(
            f"kth_eigvalsh: A must be square in its last two dimensions, got shape {tuple(A.shape)}"
        )
    if A.dtype in (torch.float16, torch.bfloat16):
        # LAPACK, cuSOLVER and CuPy have no half-precision eigensolver, and one would be
        # useless: eps(bfloat16) = 7.8e-3 makes most eigenvalue gaps unresolvable.
        raise TypeError(
            f"kth_eigvalsh: A is {A.dtype}, and eigensolvers run in float32 or float64: pass "
            "A.float() (under torch.autocast, which hands out half-precision tensors, convert "
            "explicitly; the gradient flows back through the cast in A's dtype)"
        )
    if A.dtype.is_complex:
        # The Clarke factor and backward, LAPACK's real subset driver and CuPy's path here are
        # real: a complex Hermitian matrix would need q q^H and the complex drivers throughout.
        raise TypeError(
            f"kth_eigvalsh: A must be float32 or float64 (real symmetric), got {A.dtype}: "
            "complex Hermitian input is not supported (the "
            "subgradients, the subset driver and the CuPy path are real): use "
            "torch.linalg.eigvalsh(A)[..., k], or the real symmetric embedding "
            "[[Re A, -Im A], [Im A, Re A]], whose eigenvalues are A's, each twice"
        )
    if A.dtype not in (torch.float32, torch.float64):
        raise TypeError(
            f"kth_eigvalsh: A must be float32 or float64 (real symmetric), got {A.dtype}"
        )
    k = _as_index(k, "k")
    if not isinstance(lower, bool | np.bool_):  # None or 0 would silently read the upper one
        raise TypeError(f"kth_eigvalsh: lower must be a bool, got {type(lower).__name__}")
    n = A.shape[-1]
    if not -n <= k < n:
        raise IndexError(f"kth_eigvalsh: k={k} is out of range for n={n} (need -{n} <= k < {n})")
    if backend not in _BACKENDS:
        raise ValueError(f"kth_eigvalsh: unknown backend {backend!r}; expected one of {_BACKENDS}")
    if method not in _METHODS:
        raise ValueError(f"kth_eigvalsh: unknown method {method!r}; expected one of {_METHODS}")
    if subgradient not in _SUBGRADIENTS:
        raise ValueError(
            f"kth_eigvalsh: unknown subgradient {subgradient!r}; expected one of {_SUBGRADIENTS}"
        )
    if subgradient == "mean" and method not in ("auto", "eigh"):
        raise ValueError(
            f'kth_eigvalsh: subgradient="mean" needs the whole eigenbasis: use method="eigh" '
            f'(or "auto"), not {method!r}'
        )
    _check_tolerance(cluster_tol, "cluster_tol", subgradient)
    _check_tolerance(cluster_rtol, "cluster_rtol", subgradient)
    if cluster_tol is not None and cluster_rtol is not None:
        raise ValueError("kth_eigvalsh: give cluster_tol or cluster_rtol, not both")
    if steps is not None:
        if method != "inverse_iteration":
            raise ValueError('kth_eigvalsh: steps is only used with method="inverse_iteration"')
        if not 1 <= _as_index(steps, "steps") <= _MAX_STEPS:
            # Inverse iteration gains a factor gap/shift per step: a few steps suffice, and
            # beyond 2**63 - 1 the custom op's int64 argument overflows.
            raise ValueError(f"kth_eigvalsh: steps must be between 1 and {_MAX_STEPS}, got {steps}")
    return k % n


def _check_tolerance(value: object, name: str, subgradient: str) -> None:
    if value is None:
        return
    if subgradient != "mean":
        raise ValueError(f'kth_eigvalsh: {name} is only used with subgradient="mean"')
    try:  # Python and NumPy real scalars; 10**400 overflows a float
        ok = not isinstance(value, bool | np.bool_)
        tol = float(value) if ok and isinstance(value, numbers.Real) else None
    except OverflowError:
        tol = float("inf")
    if tol is None:
        raise TypeError(f"kth_eigvalsh: {name} must be a float, got {type(value).__name__}")
    if not (tol >= 0 and tol < float("inf")):
        raise ValueError(f"kth_eigvalsh: {name} must be finite and >= 0, got {value}")


def _forward_mode(A: Tensor) -> bool:
    """Whether a forward-mode transform (``torch.func.jvp``/``jacfwd``, ``forward_ad``) is on.

    Such an input does not require grad, yet its tangent must reach the autograd.Function:
    the value-only op would drop it (a zero derivative).
    """
    import torch.autograd.forward_ad as fwAD

    if fwAD.unpack_dual(A).tangent is not None:
        return True
    try:  # private API: if a future torch moves it, the dual-tensor check above remains
        from torch._functorch.pyfunctorch import retrieve_all_functorch_interpreters

        interpreters = retrieve_all_functorch_interpreters()
    except (ImportError, AttributeError):
        return False
    return any(str(i.key()).rsplit(".", 1)[-1] == "Jvp" for i in interpreters)


def _requires_grad(A: Tensor) -> bool:
    """Whether A, or the tensor under its ``vmap`` wrappers, takes part in autograd.

    Inside ``torch.func.vmap`` the argument is a wrapper whose ``requires_grad`` is False
    even when the tensor it wraps requires grad; taking the value-only path there left
    ``.backward()`` with no formula to run.
    """
    if A.requires_grad:
        return True
    if torch.compiler.is_compiling():
        return False
    from torch._C import _functorch

    while _functorch.is_batchedtensor(A):
        A = _functorch.get_unwrapped(A)
        if A.requires_grad:
            return True
    return False


@torch.compiler.assume_constant_result
def _cupy_ok() -> bool:
    return cupy_solver.cupy_available()


@torch.compiler.assume_constant_result
def _scipy_ok() -> bool:
    return lapack.available()


def torch_batches_every_n() -> bool:
    """Whether the installed torch's CUDA ``eigh`` batches every n (torch >= 2.12).

    Reads ``major.minor`` from ``torch.__version__`` ("2.12.0", "2.12.0a0+git…",
    "2.13.0.dev20260101+cu128"); a version it cannot read counts as new.
    """
    return _batches_every_n(str(torch.__version__))


@functools.lru_cache(maxsize=8)
def _batches_every_n(version: str) -> bool:
    match = re.match(r"(\d+)\.(\d+)", version)
    if match is None:
        return True
    return (int(match[1]), int(match[2])) >= _TORCH_BATCHES_EVERY_N


def _resolve_backend(backend: str, A: Tensor) -> str:
    if backend == "torch":
        return "torch"
    if backend == "cupy":
        if A.device.type != "cuda":
            raise ValueError(
                f'kth_eigvalsh: backend="cupy" needs a CUDA tensor, got device {A.device}'
            )
        if not _cupy_ok():
            raise ModuleNotFoundError(
                'kth_eigvalsh: backend="cupy" needs CuPy with a working CUDA device '
                f"({cupy_solver.install_hint()})"
            )
        return "cupy"
    if A.device.type != "cuda" or torch_batches_every_n():
        return "torch"
    batch = math.prod(A.shape[:-2])
    return "cupy" if auto.auto_uses_cupy(A.shape[-1], batch) and _cupy_ok() else "torch"


def _resolve_method(method: str, A: Tensor, backend: str, subgradient: str, grad: bool) -> str:
    if method == "subset":
        if A.device.type != "cpu" or backend == "cupy":
            raise ValueError(
                'kth_eigvalsh: method="subset" (LAPACK ?syevr) runs on CPU tensors with '
                f'backend "torch" or "auto", got device {A.device} and backend {backend!r}'
            )
        if not _scipy_ok():
            raise ModuleNotFoundError('kth_eigvalsh: method="subset" needs SciPy')
        return "subset"
    if method != "auto":
        return method
    n = A.shape[-1]
    cpu = A.device.type == "cpu" and backend != "cupy"
    batch = math.prod(A.shape[:-2])
    if cpu and subgradient == "eigenvector" and auto.cpu_uses_subset(n, batch, grad):
        return "subset" if _scipy_ok() else "eigh"
    return "eigh"


def kth_eigvalsh(
    A: Tensor,
    k: int,
    *,
    lower: bool = True,
    method: Method = "auto",
    backend: Backend = "auto",
    subgradient: Subgradient = "eigenvector",
    cluster_tol: float | None = None,
    cluster_rtol: float | None = None,
    steps: int | None = None,
) -> Tensor:
    """The k-th smallest eigenvalue of each symmetric matrix in a batch, differentiably.

    A drop-in for ``torch.linalg.eigvalsh(A)[..., k]`` whose backward pass returns, where
    eigenvalues collide, a chosen element of the Clarke subdifferential. Accuracy per backend,
    NaN handling, transforms and ``torch.compile``: see the API page's decided behaviour.

    Args:
        A: ``(..., n, n)`` real symmetric float32/float64 tensor; one triangle is read.
        k: index into the ascending eigenvalues; negative counts from the largest.
        lower: read the lower triangle (else the upper).
        method: ``"eigh"`` (full decomposition), ``"subset"`` (LAPACK ``?syevr``, CPU),
            ``"inverse_iteration"`` (one eigenvector by shifted inverse iteration) or
            ``"auto"``: torch's own solver or the subset driver, whichever measured faster
            for the shape (``eigprec.eig.auto.cpu_uses_subset``).
        backend: ``"torch"``, ``"cupy"`` (CuPy's batched CUDA solver) or ``"auto"``.
        subgradient: ``"eigenvector"`` (q qᵀ) or ``"mean"`` (U Uᵀ / r over λ_k's cluster).
        cluster_tol: largest gap inside a cluster for ``"mean"`` (absolute); default
            :func:`default_cluster_tol`.
        cluster_rtol: the same relative to each matrix's max|λ|; not with ``cluster_tol``.
        steps: inverse-iteration steps (default 3, at most 1000).

    Returns:
        ``(...)`` k-th eigenvalues; NaN, with a NaN gradient, for entries whose read triangle
        holds NaN/Inf or on which the solver fails.

    Raises:
        TypeError: ``A`` not a dense float32/float64 tensor (half precision and complex
            input included: see the API page); ``k``/``steps`` not an int; ``lower`` not a
            bool; a tolerance not a real number.
        ValueError: bad shape, unknown option, an option where it is not used, tolerances
            negative, infinite or both given, ``steps`` outside [1, 1000], a device the
            method cannot use.
        IndexError: ``k`` outside ``[-n, n)``.
        ModuleNotFoundError: ``backend="cupy"`` without CuPy; ``method="subset"`` without SciPy.

    Example:
        >>> import torch
        >>> A = torch.tensor([[2.0, 1.0], [1.0, 2.0]], requires_grad=True)
        >>> lam = kth_eigvalsh(A, -1)
        >>> lam.backward()
        >>> float(lam), A.grad.round(decimals=6).tolist()
        (3.0, [[0.5, 0.5], [0.5, 0.5]])
    """
    if (
        type(A) is Tensor
        and type(k) is int
        and method == "auto"
        and (subgradient == "eigenvector" or subgradient == "mean")
        and cluster_tol is None
        and cluster_rtol is None
        and steps is None
        and (lower is True or lower is False)
        and (backend == "auto" or backend == "torch")
    ):
        lam = _thin(A, k, lower, backend, subgradient == "mean")
        if lam is not None:
            return lam
    k = _validate(A, k, lower, backend, method, subgradient, cluster_tol, steps, cluster_rtol)
    lower = bool(lower)
    compiling = torch.compiler.is_compiling()
    resolved = _resolve_backend(backend, A)
    grad = torch.is_grad_enabled() and _requires_grad(A)
    if not compiling:
        grad = grad or _forward_mode(A)
    how = _resolve_method(method, A, resolved, subgradient, grad)
    if not grad and how != "inverse_iteration":
        if compiling or _transformed(A):
            return value_op(A, k, lower, resolved, how)
        return value_impl(A, k, lower, resolved, how)
    if cluster_rtol is not None:
        tol = -float(cluster_rtol)  # the op's encoding of a relative tolerance
    else:
        tol = math.nan if cluster_tol is None else float(cluster_tol)
    n_steps = 3 if steps is None else operator.index(steps)
    args = (A, k, lower, resolved, how, subgradient, tol, n_steps)
    if not grad:  # inverse iteration's value is its eigenvector's Rayleigh quotient
        with torch.no_grad():
            return (factor_op(*args) if compiling or _transformed(A) else factor_impl(*args))[0]
    # A compiled graph runs the op's own (first-order) autograd; eager code runs the
    # autograd.Function that torch.func and second derivatives understand.
    if compiling:
        return factor_op(*args)[0]
    if _transformed(A):
        return KthEigvalsh.apply(*args)[0]
    return apply_eager(*args)[0]


def _transformed(A: Tensor) -> bool:
    """Whether a ``torch.func`` transform is active or ``A`` is one's (possibly dead) wrapper."""
    return torch._C._are_functorch_transforms_active() or _functorch.is_functorch_wrapped_tensor(A)
