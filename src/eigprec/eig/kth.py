"""The k-th eigenvalue of batched symmetric matrices, with a chosen Clarke subgradient.

``kth_eigvalsh`` is a drop-in for ``torch.linalg.eigvalsh(A)[..., k]`` that

* computes no eigenvectors when no gradient is needed; when one is, it keeps for the backward
  pass the k-th eigenvector (n numbers per matrix; the weighted eigenbasis, n², for the
  ``"mean"`` subgradient) and, in eager mode, a reference to ``A`` (no copy: second
  derivatives recompute the decomposition from it; ``A`` then stays alive until the
  backward pass, as an intermediate such as ``X + X.mT`` would not otherwise — n² per matrix,
  what ``torch.linalg.eigvalsh`` keeps in its eigenvectors). A compiled graph keeps the
  eigenvector alone. ``method=`` chooses how (see :func:`kth_eigvalsh`) — on the CPU LAPACK's
  subset driver computes just the one eigenvalue, or the one eigenpair;
* can run on CuPy's batched CUDA eigensolver (a DLPack hand-off without a copy, torch's current
  stream, no host synchronisation; the solver itself overwrites one copy of the batch);
* returns, where eigenvalues collide and λ_k is not differentiable, an element of the Clarke
  subdifferential ∂λ_k(X) = {U W Uᵀ : W ⪰ 0, tr W = 1} — either the solver's q qᵀ or the
  minimum-norm element U Uᵀ / r;
* maps a batch entry holding NaN/Inf to NaN (value and gradient) without touching the others,
  and without asking the host whether any entry is bad. A bad entry masked out of the loss
  (``torch.where`` or indexing; its incoming gradient is then 0) contributes a zero gradient,
  so parameters shared across the batch (``W + D_i``) keep finite gradients; a loss that
  keeps the NaN value makes them NaN, as any NaN in a sum does. (With ``backend="torch"`` on CUDA,
  ``torch.linalg`` itself still synchronises to check its solver's status; the CuPy backend
  does not: it reads the solver's per-matrix status on the device.)

Threads: the library sets no thread limits. ``method="subset"`` calls LAPACK through SciPy,
whose BLAS (OpenBLAS in SciPy's wheels) keeps its own thread pool, independent of
``torch.set_num_threads``; on a many-core CPU limit it with ``OPENBLAS_NUM_THREADS`` before
the process starts or with ``threadpoolctl.threadpool_limits`` (not a dependency of this
package). ``torch.linalg`` follows ``torch.set_num_threads``.

Half precision: float16/bfloat16 input (e.g. under ``torch.autocast``) is refused with a
``TypeError`` that names the remedy, ``A.float()``: no eigensolver here takes it, and at
bfloat16's eps = 7.8e-3 most eigenvalue gaps would be below its resolution anyway.

The gradient follows ``torch.linalg.eigvalsh``'s convention: it is the symmetric matrix
q qᵀ · grad, the derivative along symmetric perturbations, even though only one triangle of
``A`` is read. Compose with a symmetric parametrisation (e.g. ``X + X.mT``) for an exact
gradient with respect to free parameters. For the same reason ``torch.autograd.gradcheck``
called on ``kth_eigvalsh`` (or on ``torch.linalg.eigvalsh``) directly fails: its finite
differences perturb one entry at a time and the unread triangle's entries then have derivative
0, not the symmetric q qᵀ. Through ``X + X.mT`` it passes.

What works where (checked in ``tests/test_eig*.py``):

* eager autograd, ``torch.autograd.gradcheck`` through ``X + X.mT`` (float64, simple
  eigenvalues);
* torch's transforms, as for ``torch.linalg.eigvalsh``: ``torch.func.grad``/``jacrev``/
  ``hessian``, ``vmap`` (of the value, of ``grad`` — per-sample gradients — and of an input
  that requires grad followed by ``.backward()``), forward mode (``torch.func.jvp``/``jacfwd``,
  ``torch.autograd.forward_ad``: the tangent is ⟨G, Ȧ⟩ for the element G the backward
  returns, ⟨q qᵀ, Ȧ⟩ at a simple eigenvalue) and second derivatives (``create_graph=True``:
  the derivative of G, by the Daleckii–Krein formula — the Hessian term
  Σ_{j≠k} 2 (q_jᵀ E q_k)² / (λ_k − λ_j) at a simple eigenvalue). A second derivative
  recomputes the full decomposition with ``torch.linalg.eigh`` (whatever ``method``/
  ``backend`` computed the first). At a tie, the documented choice: ``"mean"`` returns the
  second derivative of the cluster's average eigenvalue, which is smooth there;
  ``"eigenvector"`` returns that of q qᵀ, which is huge or infinite, as
  ``torch.linalg.eigh``'s is;
* ``torch.compile(..., fullgraph=True)``, also with ``dynamic=True`` and ``k`` an argument:
  the work is two ``torch.library.custom_op`` s with fake (meta) kernels, so the graph never
  breaks, forward and backward; a compiled graph runs the op's first-order backward
  (second derivatives and ``torch.func`` transforms are for eager code). Bad arguments are
  refused while dynamo traces the call, so with ``fullgraph=True`` the error arrives as
  dynamo's ``Unsupported: Observed exception``, with this function's message in its chain
  (``ObservedIndexError: ... k=5 is out of range ...``); call it once uncompiled to see the
  message alone.
"""

from __future__ import annotations

import math
import numbers
import operator
import re
from typing import Literal

import numpy as np
import torch
from torch import Tensor

from eigprec.eig import auto, cupy_solver, lapack
from eigprec.eig.ops import KthEigvalsh, factor_op, value_op
from eigprec.eig.tolerance import default_cluster_tol

__all__ = ["default_cluster_tol", "kth_eigvalsh"]

Backend = Literal["auto", "torch", "cupy"]
Method = Literal["auto", "eigh", "subset", "inverse_iteration"]
Subgradient = Literal["eigenvector", "mean"]

_BACKENDS = ("auto", "torch", "cupy")
_METHODS = ("auto", "eigh", "subset", "inverse_iteration")
_SUBGRADIENTS = ("eigenvector", "mean")
_MAX_STEPS = 1000
# From benchmarks/bench_eig.py's size sweep (one CPU thread): LAPACK's subset driver, called
# per matrix from Python, beats torch.linalg.eigvalsh for the value from n ≈ 32 and
# torch.linalg.eigh for value + eigenvector from n ≈ 16; below, the loop's overhead dominates.
# Medians of 7 interleaved rounds, ÷ eigvalsh: value 1.07 / 1.05 / 0.88 / 0.85 at n = 16 / 24 /
# 32 / 45; value + gradient 2.72 (subset) vs 2.07 (eigh) at n = 8, 1.45 vs 2.19 at n = 16.
_SUBSET_MIN_N_VALUE = 32
_SUBSET_MIN_N_GRAD = 16
# torch.linalg.eigh on CUDA before torch 2.12 reaches cuSOLVER's batched solver only for
# n <= 32 and loops over the batch above (pytorch issue 175585); from 2.12 it batches every n
# (pytorch PR 175403, in the 2.12 release notes; not measured here). Only in the first case
# is CuPy's batched solver known to help, so only there does "auto" pick CuPy.
_TORCH_BATCHES_EVERY_N = (2, 12)


# --------------------------------------------------------------------------- public entry


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
    tol_name: str = "cluster_tol",
) -> int:
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
    if cluster_tol is not None:
        if subgradient != "mean":
            raise ValueError(f'kth_eigvalsh: {tol_name} is only used with subgradient="mean"')
        try:  # Python and NumPy real scalars; 10**400 overflows a float
            ok = not isinstance(cluster_tol, bool | np.bool_)
            tol = float(cluster_tol) if ok and isinstance(cluster_tol, numbers.Real) else None
        except OverflowError:
            tol = float("inf")
        if tol is None:
            raise TypeError(
                f"kth_eigvalsh: {tol_name} must be a float, got {type(cluster_tol).__name__}"
            )
        if not (tol >= 0 and tol < float("inf")):
            raise ValueError(f"kth_eigvalsh: {tol_name} must be finite and >= 0, got {cluster_tol}")
    if steps is not None:
        if method != "inverse_iteration":
            raise ValueError('kth_eigvalsh: steps is only used with method="inverse_iteration"')
        if not 1 <= _as_index(steps, "steps") <= _MAX_STEPS:
            # Inverse iteration gains a factor gap/shift per step: a few steps suffice, and
            # beyond 2**63 - 1 the custom op's int64 argument overflows.
            raise ValueError(f"kth_eigvalsh: steps must be between 1 and {_MAX_STEPS}, got {steps}")
    return k % n


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
    match = re.match(r"(\d+)\.(\d+)", str(torch.__version__))
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
    n_min = _SUBSET_MIN_N_GRAD if grad else _SUBSET_MIN_N_VALUE
    cpu = A.device.type == "cpu" and backend != "cupy"
    if cpu and subgradient == "eigenvector" and A.shape[-1] >= n_min and _scipy_ok():
        return "subset"
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

    Accuracy, relative to ‖A‖₂ (what is measured or provable, per backend):

    * ``"torch"`` on the CPU, and ``method="subset"``: LAPACK's backward-stable drivers, so
      ``|λ_k − λ_k(A)|`` ≤ p(n) · eps · ‖A‖₂ (Weyl's inequality), p(n) a low-degree polynomial;
      measured ≤ 2.3e-7 in float32 for n ≤ 40 (``python -m eigprec_book.record eig --dry-run``).
      The gradient q qᵀ has the eigenvector's error, ≈ eps · ‖A‖₂ / gap_k (Davis–Kahan): it
      is accurate only where λ_k is separated from its neighbours.
    * ``"cupy"`` (cuSOLVER ``syevjBatched``): float32 value errors grow about linearly in n —
      measured on an H200 (CuPy 14.2) 8.4e-6 (n = 45), 2.05e-5 (100), 1.6e-4 (256) and
      6.4e-4 (1024) of max|λ|, with eigenvectors far from orthonormal at n = 1024
      (‖VᵀV − I‖_F = 2.4e-2), which the gradient q qᵀ inherits; float64 Jacobi gave 2e-12.
      Eigenvalues that miss ‖A‖_F² by more than (32n + 64) ulps, on A scaled to unit largest
      entry, are returned as NaN: a convergence test (an answer Jacobi stopped early fails
      it), not an accuracy test (Jacobi's own drift passes it). ``"auto"`` keeps float32
      Jacobi to n ≤ 256.
    * ``"torch"`` on CUDA follows the installed torch: before 2.12, batched Jacobi for n ≤ 32
      and a per-matrix ``syevd`` above (1.3e-6 of max|λ| at n = 1024, the k-th value 1.9e-8,
      H200). From torch 2.12 batched ``eigh`` is routed to ``syevjBatched`` for every n
      (pytorch issue 192483, PR 175403): its float32 results at large n may then carry the
      Jacobi error above. Not yet measured on a GPU with torch ≥ 2.12; ``python -m
      eigprec_book.record eig`` records it (value error, eigenvector residual and orthogonality per
      shape).
    * ``method="inverse_iteration"``: the eigenvalue as its backend's; the eigenvector within
      ≈ 1e-5 where the relative gap at k is ≥ 1e-3 (float32, n = 45, measured).

    Args:
        A: ``(..., n, n)`` real symmetric float32/float64 tensor; only the lower (``lower=True``)
            or upper triangle is read.
        k: index into the ascending eigenvalues, as in ``torch.linalg.eigvalsh(A)[..., k]``;
            negative values count from the largest (``-1`` is λ_max). A Python or NumPy
            integer or a 0-d integer tensor (not a bool, nor a one-element tensor of any shape).
        lower: read the lower triangle (else the upper); a bool.
        method: how λ_k and, for the gradient, its eigenvector are computed:
            ``"eigh"`` — the exact full decomposition (``torch.linalg.eigvalsh``/``eigh`` or
            CuPy): every eigenvector, needed by ``subgradient="mean"``;
            ``"subset"`` — LAPACK's subset driver ``?syevr`` (``range='I'``, through SciPy),
            CPU only: the one eigenvalue, or the one eigenpair, per matrix;
            ``"inverse_iteration"`` — all eigenvalues from the eigenvalue-only solver, then the
            one eigenvector from ``steps`` steps of shifted inverse iteration (any device, no
            host synchronisation); its gradient is accurate to ≈ 1e-5 only where the relative
            gap at k is ≥ 1e-3, and at near-ties it is some unit vector of the near-eigenspace;
            ``"auto"`` — ``"subset"`` for CPU tensors with ``subgradient="eigenvector"`` and
            n ≥ 32 (no gradient) or n ≥ 16 (gradient) when SciPy is installed, where it
            measures faster (``benchmarks/bench_eig.py``); ``"eigh"`` otherwise.
        backend: solver of ``"eigh"`` and of ``"inverse_iteration"``'s eigenvalues: ``"torch"``
            (``torch.linalg``), ``"cupy"`` (CuPy's batched CUDA solver via DLPack on torch's
            current stream, no host synchronisation) or ``"auto"``, which picks per
            ``(batch, n)`` a solver whose error is within 10× of the most accurate one's and
            whose time is within 1.2× of the fastest of those (the rule, checked at every
            shape of the recorded H100 grid, ``book/data/eig_gpu.json``, by
            ``tests/test_eig_auto_choice.py``): under torch < 2.12, where torch's ``eigh``
            loops over a CUDA batch for n > 32 (pytorch issue 175585), CuPy for
            32 < n ≤ 256, and for 16 < n ≤ 32 from 1,000 matrices on, when CuPy works; torch
            otherwise — above n = 256 because float32 batched Jacobi loses accuracy there
            (below). From torch 2.12, whose ``eigh`` batches every n on CUDA (pytorch PR
            175403), always torch: the CuPy detour then buys no speed. What ``"cupy"`` still
            buys when asked for: no host synchronisation (torch.linalg checks its solver's
            status on the host) and a failed matrix returned as NaN instead of an exception.
        subgradient: which element of the Clarke subdifferential the backward pass returns:
            ``"eigenvector"`` — q qᵀ for the solver's k-th eigenvector (the gradient wherever λ_k
            is simple); ``"mean"`` — U Uᵀ / r over the r eigenvectors of λ_k's cluster: the
            run of consecutive (ascending) eigenvalues, each within ``cluster_tol`` of the
            next, that holds λ_k. At an exact tie this is the minimum-norm element of ∂λ_k,
            independent of the basis the solver picked inside the repeated eigenvalue.
        cluster_tol: largest gap between consecutive eigenvalues of one cluster for
            ``"mean"`` (absolute, in the units of A); default :func:`default_cluster_tol`
            (eps · min(3 √max(n, 16), 20) · max|λ| per matrix: above the largest gap
            rounding was measured to open between copies of an exact tie, n = 3 … 4000, and
            below the gaps the solver resolves; its range of validity is stated there).
            What a tolerance ε of your own returns: if the cluster's computed eigenvalues
            span δ ≤ (r − 1) · ε, then U Uᵀ / r is a Goldstein δ-subgradient — an average of
            gradients of λ_k at matrices within spectral distance δ of A (those with the
            cluster's eigenvalues pulled apart), as in gradient sampling
            (Burke–Lewis–Overton 2005) — and not, in general, a Clarke subgradient at A,
            where λ_k may be differentiable with gradient q qᵀ. A tolerance below the
            default may split an exact tie: the result is then q qᵀ for some q of the tie, a
            Clarke subgradient but not the minimum-norm one.
        cluster_rtol: the same, relative to each matrix's max|λ| (the tolerance is
            ``cluster_rtol · max|λ|`` per batch entry, so one value fits a batch of matrices
            of different scales; the default is ``eps · min(3 √max(n, 16), 20)`` in these
            units). Give ``cluster_tol`` or ``cluster_rtol``, not both.
        steps: inverse-iteration steps for ``method="inverse_iteration"`` (default 3, at
            most 1000).

    Returns:
        ``(...)`` tensor of k-th eigenvalues, NaN for batch entries whose read triangle holds
        NaN or Inf or on which the solver fails (its status, or with ``"cupy"`` eigenvalues
        that fail a norm check: cuSOLVER's status missed a non-convergence once) and a NaN
        gradient for them.

    Raises:
        TypeError: ``A`` not a tensor, sparse, or not float32/float64 (float16/bfloat16, as
            autocast produces: the message says to pass ``A.float()``); ``k``/``steps`` not
            an int (bools and bool, float or non-0-d tensors included); ``lower`` not a
            bool (NumPy bools count); ``cluster_tol`` or ``cluster_rtol`` not a real number
            (Python or NumPy).
        ValueError: ``A`` with fewer than 2 dims or not square; unknown ``method``,
            ``backend`` or ``subgradient``; ``"mean"`` with a method other than "eigh"/"auto";
            ``backend="cupy"`` on a non-CUDA tensor; ``method="subset"`` off the CPU; ``A``
            on the meta device; ``cluster_tol``/``cluster_rtol`` negative or not finite
            (10**400 included), or both given; ``steps`` outside [1, 1000]; any of these
            given where it is not used.
        IndexError: ``k`` outside ``[-n, n)``.
        ModuleNotFoundError: ``backend="cupy"`` without a working CuPy; ``method="subset"``
            without SciPy.

    Example:
        >>> import torch
        >>> A = torch.tensor([[2.0, 1.0], [1.0, 2.0]], requires_grad=True)
        >>> lam = kth_eigvalsh(A, -1)
        >>> float(lam)
        3.0
        >>> lam.backward()
        >>> A.grad
        tensor([[0.5000, 0.5000],
                [0.5000, 0.5000]])
        >>> B = torch.diag(torch.tensor([1.0, 2.0, 4.0])).requires_grad_(True)
        >>> kth_eigvalsh(B, -1, method="inverse_iteration").backward()
        >>> B.grad.diagonal().round(decimals=6)
        tensor([0., 0., 1.])
    """
    k = _validate(A, k, lower, backend, method, subgradient, cluster_tol, steps)
    if cluster_rtol is not None:
        if cluster_tol is not None:
            raise ValueError("kth_eigvalsh: give cluster_tol or cluster_rtol, not both")
        _validate(A, k, lower, backend, method, subgradient, cluster_rtol, steps, "cluster_rtol")
    lower = bool(lower)
    compiling = torch.compiler.is_compiling()
    resolved = _resolve_backend(backend, A)
    grad = torch.is_grad_enabled() and _requires_grad(A)
    if not compiling:
        grad = grad or _forward_mode(A)
    how = _resolve_method(method, A, resolved, subgradient, grad)
    if grad:
        if cluster_rtol is not None:
            tol = -float(cluster_rtol)  # the op's encoding of a relative tolerance
        else:
            tol = math.nan if cluster_tol is None else float(cluster_tol)
        n_steps = 3 if steps is None else operator.index(steps)
        args = (A, k, lower, resolved, how, subgradient, tol, n_steps)
        # A compiled graph runs the op's own (first-order) autograd; eager code runs the
        # autograd.Function that torch.func and second derivatives understand.
        lam, _ = factor_op(*args) if compiling else KthEigvalsh.apply(*args)
        return lam
    return value_op(A, k, lower, resolved, how)
