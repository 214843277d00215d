"""The k-th eigenvalue of batched symmetric matrices, with a chosen Clarke subgradient.

``kth_eigvalsh`` is a drop-in for ``torch.linalg.eigvalsh(A)[..., k]`` that

* computes no eigenvectors when no gradient is needed, and keeps only what the backward pass
  needs when one is (the k-th eigenvector, or a weighted eigenbasis for the ``"mean"``
  subgradient); ``method=`` chooses how (see :func:`kth_eigvalsh`) — on the CPU LAPACK's subset
  driver computes just the one eigenvalue, or the one eigenpair;
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
* ``torch.compile(..., fullgraph=True)``: the work is two ``torch.library.custom_op`` s with
  fake (meta) kernels, so the graph never breaks, forward and backward;
* ``torch.func.vmap``, of the value and of an input that requires grad followed by
  ``.backward()`` (a batching rule is registered: the op is batched already, so vmap only moves
  the mapped dimension to the front);
* not supported, and refused with ``NotImplementedError`` rather than answered wrongly:
  ``torch.func.grad``/``jacrev``/``hessian`` (``custom_op``'s ``register_autograd`` is not
  functorch-aware in torch 2.13), forward-mode AD (``torch.func.jvp``/``jacfwd``,
  ``torch.autograd.forward_ad``: the tangent would be dropped), and second derivatives
  through ``create_graph=True`` (the backward treats the eigenvector as a constant).
"""

from __future__ import annotations

import operator
from typing import Literal

import torch
from torch import Tensor

from eigprec import _cupy_bridge, _eig_invit, _eig_lapack
from eigprec._eig_tol import default_cluster_tol, measure_tie_splits

__all__ = ["default_cluster_tol", "kth_eigvalsh", "measure_tie_splits"]

Backend = Literal["auto", "torch", "cupy"]
Method = Literal["auto", "eigh", "subset", "inverse_iteration"]
Subgradient = Literal["eigenvector", "mean"]

_BACKENDS = ("auto", "torch", "cupy")
_METHODS = ("auto", "eigh", "subset", "inverse_iteration")
_SUBGRADIENTS = ("eigenvector", "mean")
# From benchmarks/bench_eig.py's size sweep (one CPU thread): LAPACK's subset driver, called
# per matrix from Python, beats torch.linalg.eigvalsh for the value from n ≈ 32 and
# torch.linalg.eigh for value + eigenvector from n ≈ 16; below, the loop's overhead dominates.
# Medians of 7 interleaved rounds, ÷ eigvalsh: value 1.07 / 1.05 / 0.88 / 0.85 at n = 16 / 24 /
# 32 / 45; value + gradient 2.72 (subset) vs 2.07 (eigh) at n = 8, 1.45 vs 2.19 at n = 16.
_SUBSET_MIN_N_VALUE = 32
_SUBSET_MIN_N_GRAD = 16
# torch.linalg.eigh on CUDA before torch 2.12 reaches cuSOLVER's batched solver only for
# n <= 32 and loops over the batch above (pytorch issue 175585); pytorch issue 192483 reports
# that PR 175403 made it batched for every n in 2.12 (not measured here: no GPU). Only in the
# first case is CuPy's batched Jacobi known to help, so only there does "auto" pick CuPy.
_TORCH_BATCHES_EVERY_N = (2, 12)


# --------------------------------------------------------------------------- helpers


def _bad_entries(A: Tensor, lower: bool) -> Tensor:
    """Boolean ``(...)`` mask of batch entries whose *read* triangle holds NaN or Inf."""
    n = A.shape[-1]
    tri = torch.ones(n, n, dtype=torch.bool, device=A.device)
    tri = tri.tril() if lower else tri.triu()
    return (~torch.isfinite(A) & tri).any(dim=(-2, -1))


def _sanitise(A: Tensor, lower: bool) -> tuple[Tensor, Tensor | None]:
    """Replace bad batch entries by zero matrices; return the mask (None: nothing to mask).

    LAPACK and cuSOLVER may raise, loop or return plausible numbers on NaN input, so bad
    entries never reach them. On the CPU a single sum screens the whole batch first (NaN and
    Inf propagate through a sum; an overflow only sends us down the exact path), so clean
    input pays one cheap reduction. On CUDA the mask is always applied on the device, since
    asking whether any entry is bad would synchronise with the host.
    """
    if A.numel() == 0:
        return A, None
    if A.device.type == "cpu" and bool(torch.isfinite(A.sum())):
        return A, None
    bad = _bad_entries(A, lower)
    return torch.where(
        bad[..., None, None], torch.zeros((), dtype=A.dtype, device=A.device), A
    ), bad


def _nan_where(bad: Tensor | None, x: Tensor, extra_dims: int) -> Tensor:
    if bad is None:
        return x
    mask = bad.reshape(bad.shape + (1,) * extra_dims)
    return torch.where(mask, torch.full((), float("nan"), dtype=x.dtype, device=x.device), x)


def _eigvalsh(A: Tensor, lower: bool, backend: str) -> Tensor:
    if backend == "cupy":
        return _cupy_bridge.eigvalsh(A, lower)
    return torch.linalg.eigvalsh(A, UPLO="L" if lower else "U")


def _eigh(A: Tensor, lower: bool, backend: str) -> tuple[Tensor, Tensor]:
    if backend == "cupy":
        return _cupy_bridge.eigh(A, lower)
    w, V = torch.linalg.eigh(A, UPLO="L" if lower else "U")
    return w, V


# --------------------------------------------------------------------------- custom ops


def _value_impl(A: Tensor, k: int, lower: bool, backend: str, method: str) -> Tensor:
    """λ_k only: the no-grad path never forms eigenvectors."""
    A_clean, bad = _sanitise(A, lower)
    if method == "subset":
        lam = _eig_lapack.kth_eigenpair(A_clean, k, lower, vectors=False)[0]
    else:
        lam = _eigvalsh(A_clean, lower, backend)[..., k].clone()
    return _nan_where(bad, lam, 0)


_value_op = torch.library.custom_op("eigprec::kth_eigvalsh_value", mutates_args=())(_value_impl)


@_value_op.register_fake
def _(A: Tensor, k: int, lower: bool, backend: str, method: str) -> Tensor:
    return A.new_empty(A.shape[:-2])


def _factor_impl(
    A: Tensor,
    k: int,
    lower: bool,
    backend: str,
    method: str,
    subgradient: str,
    cluster_tol: float,
    steps: int,
) -> tuple[Tensor, Tensor]:
    """λ_k and a factor F with F Fᵀ the chosen element of ∂λ_k (``cluster_tol < 0``: default)."""
    A_clean, bad = _sanitise(A, lower)
    # [show:methods]
    if method == "subset":  # one eigenpair from LAPACK's subset driver (CPU)
        lam, q = _eig_lapack.kth_eigenpair(A_clean, k, lower, vectors=True)
        F = q[..., None]
    elif method == "inverse_iteration":  # all eigenvalues, then one eigenvector
        lam = _eigvalsh(A_clean, lower, backend)[..., k]
        F = _eig_invit.eigenvector(A_clean, lam, lower, steps)[..., None]
    # [/show:methods]
    else:
        w, V = _eigh(A_clean, lower, backend)
        lam = w[..., k]
        if subgradient == "eigenvector":
            F = V[..., :, k : k + 1]
        else:
            # A user's tolerance stays a Python scalar: turning it into a CUDA tensor would be
            # a blocking host-to-device copy.
            n = A.shape[-1]
            tol = default_cluster_tol(w, n)[..., None] if cluster_tol < 0 else cluster_tol
            # A mask over *all* eigenvectors keeps shapes static and avoids asking the host
            # how large each cluster is: weights are 1/r inside the cluster and 0 outside, so
            # F Fᵀ = V diag(weights) Vᵀ = U Uᵀ / r.
            # [show:mean]
            # The cluster is the chain of consecutive eigenvalues (ascending) less than tol
            # apart that holds λ_k: rounding spreads the r copies of a tie over up to ≈ 5× the
            # gap between neighbouring copies, so a ball of radius tol around λ_k would split
            # a large tie (eigprec._eig_tol).
            breaks = (w[..., 1:] - w[..., :-1]) > tol
            run = torch.nn.functional.pad(breaks.cumsum(-1), (1, 0))
            inside = run == run[..., k : k + 1]
            weights = inside.to(w.dtype) / inside.sum(dim=-1, keepdim=True).to(w.dtype)
            F = V * weights.sqrt()[..., None, :]
            # [/show:mean]
    return _nan_where(bad, lam.clone(), 0), _nan_where(bad, F.contiguous(), 2)


_factor_op = torch.library.custom_op("eigprec::kth_eigvalsh_factor", mutates_args=())(_factor_impl)


@_factor_op.register_fake
def _(
    A: Tensor,
    k: int,
    lower: bool,
    backend: str,
    method: str,
    subgradient: str,
    cluster_tol: float,
    steps: int,
) -> tuple[Tensor, Tensor]:
    n = A.shape[-1]
    m = 1 if subgradient == "eigenvector" else n
    return A.new_empty(A.shape[:-2]), A.new_empty((*A.shape[:-2], n, m))


def _factor_setup(ctx, inputs, output) -> None:
    _, F = output
    ctx.save_for_backward(F)
    ctx.mark_non_differentiable(F)


def _factor_backward(ctx, grad_lam: Tensor, grad_F: Tensor | None):
    (F,) = ctx.saved_tensors
    # Grad mode is on in a backward pass only under create_graph=True, i.e. when someone
    # will differentiate this gradient: refuse rather than return a graph without dq/dA.
    if torch.is_grad_enabled():
        raise NotImplementedError(
            "kth_eigvalsh provides first derivatives only: a second derivative needs the "
            "derivative of the eigenvector, which this backward does not model "
            "(called with create_graph=True)."
        )
    # A bad entry's F is NaN; where its incoming gradient is 0 (masked out of the loss), its
    # contribution must be 0, not 0 · NaN, or a parameter shared across the batch turns NaN.
    F = torch.where((grad_lam == 0)[..., None, None], F.new_zeros(()), F)
    # [show:backward]
    if F.shape[-1] == 1:
        # (grad · q) qᵀ as a broadcast product: exact, no GEMM that TF32 could round, and one
        # pass over the (..., n, n) result (scaling q first saves a second, costly at n = 45).
        grad_A = (F * grad_lam[..., None, None]) * F.mT
    elif F.dtype == torch.float32:
        # U Uᵀ / r through a float64 GEMM, which never runs in TF32.
        grad_A = (F.double() @ F.double().mT).to(F.dtype) * grad_lam[..., None, None]
    else:
        grad_A = (F @ F.mT) * grad_lam[..., None, None]
    # [/show:backward]
    return grad_A, None, None, None, None, None, None, None


_factor_op.register_autograd(_factor_backward, setup_context=_factor_setup)


def _move_batch_front(A: Tensor, bdim: int | None) -> Tensor:
    return A if bdim is None else A.movedim(bdim, 0)


# The ops already accept any leading batch shape, so vmap only has to move its dimension to
# the front and declare it there.
@_value_op.register_vmap
def _(info, in_dims, A: Tensor, k: int, lower: bool, backend: str, method: str):
    bdim = in_dims[0]
    out = _value_op(_move_batch_front(A, bdim), k, lower, backend, method)
    return out, (None if bdim is None else 0)


@_factor_op.register_vmap
def _(info, in_dims, A, k, lower, backend, method, subgradient, cluster_tol, steps):
    bdim = in_dims[0]
    out = _factor_op(
        _move_batch_front(A, bdim), k, lower, backend, method, subgradient, cluster_tol, steps
    )
    dim = None if bdim is None else 0
    return out, (dim, dim)


# --------------------------------------------------------------------------- public entry


def _validate(
    A: object,
    k: object,
    lower: object,
    backend: str,
    method: str,
    subgradient: str,
    cluster_tol,
    steps,
) -> int:
    if not isinstance(A, Tensor):
        raise TypeError(f"kth_eigvalsh: A must be a torch.Tensor, got {type(A).__name__}")
    if A.dim() < 2:
        raise ValueError(
            f"kth_eigvalsh: A must have at least 2 dimensions, got shape {tuple(A.shape)}"
        )
    if A.shape[-1] != A.shape[-2]:
        raise ValueError(
            f"kth_eigvalsh: A must be square in its last two dimensions, got shape {tuple(A.shape)}"
        )
    if A.dtype not in (torch.float32, torch.float64):
        raise TypeError(
            f"kth_eigvalsh: A must be float32 or float64 (real symmetric), got {A.dtype}"
        )
    if isinstance(k, bool) or not hasattr(k, "__index__"):
        raise TypeError(f"kth_eigvalsh: k must be an int, got {type(k).__name__}")
    k = operator.index(k)  # numpy integers too, as indexing accepts them
    if not isinstance(lower, bool):  # None or 0 would otherwise silently read the upper triangle
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
            raise ValueError('kth_eigvalsh: cluster_tol is only used with subgradient="mean"')
        if isinstance(cluster_tol, bool) or not isinstance(cluster_tol, (int, float)):
            raise TypeError(
                f"kth_eigvalsh: cluster_tol must be a float, got {type(cluster_tol).__name__}"
            )
        if not (cluster_tol >= 0 and cluster_tol < float("inf")):
            raise ValueError(
                f"kth_eigvalsh: cluster_tol must be finite and >= 0, got {cluster_tol}"
            )
    if steps is not None:
        if method != "inverse_iteration":
            raise ValueError('kth_eigvalsh: steps is only used with method="inverse_iteration"')
        if isinstance(steps, bool) or not hasattr(steps, "__index__"):
            raise TypeError(f"kth_eigvalsh: steps must be an int, got {type(steps).__name__}")
        if operator.index(steps) < 1:
            raise ValueError(f"kth_eigvalsh: steps must be >= 1, got {steps}")
    return k % n


def _refuse_unsupported_transforms(A: Tensor) -> None:
    """Raise where a transform would otherwise drop or garble the derivative silently.

    ``torch.library.custom_op``'s autograd registration is not functorch-aware (torch 2.13):
    under ``torch.func.grad`` it fails with an opaque message, and under forward-mode AD the
    tangent is silently dropped (``jvp`` would report a zero derivative). Say so plainly.
    """
    import torch.autograd.forward_ad as fwAD

    try:  # private API: if a future torch moves it, keep the forward-AD check at least
        from torch._functorch.pyfunctorch import retrieve_all_functorch_interpreters

        interpreters = retrieve_all_functorch_interpreters()
    except (ImportError, AttributeError):
        interpreters = []
    kinds = {str(i.key()).rsplit(".", 1)[-1] for i in interpreters}
    forward_mode = "Jvp" in kinds or fwAD.unpack_dual(A).tangent is not None
    if forward_mode or "Grad" in kinds:
        what = (
            "forward-mode AD (torch.func.jvp/jacfwd, forward_ad)"
            if forward_mode
            else ("torch.func.grad/jacrev/hessian")
        )
        raise NotImplementedError(
            f"kth_eigvalsh does not support {what}: its custom op's autograd is reverse-mode "
            "only and not functorch-aware. Use torch.autograd.grad / .backward() (batched "
            "input instead of vmap-of-grad)."
        )


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
    return _cupy_bridge.cupy_available()


@torch.compiler.assume_constant_result
def _scipy_ok() -> bool:
    return _eig_lapack.available()


def _torch_batches_every_n() -> bool:
    major, minor = (int(part) for part in torch.__version__.split(".")[:2])
    return (major, minor) >= _TORCH_BATCHES_EVERY_N


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
                "(pip install cupy-cuda12x)"
            )
        return "cupy"
    helps = A.shape[-1] > 32 and not _torch_batches_every_n()
    return "cupy" if A.device.type == "cuda" and helps and _cupy_ok() else "torch"


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
    steps: int | None = None,
) -> Tensor:
    """The k-th smallest eigenvalue of each symmetric matrix in a batch, differentiably.

    Args:
        A: ``(..., n, n)`` real symmetric float32/float64 tensor; only the lower (``lower=True``)
            or upper triangle is read.
        k: index into the ascending eigenvalues, as in ``torch.linalg.eigvalsh(A)[..., k]``;
            negative values count from the largest (``-1`` is λ_max). Any integer type.
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
            current stream, no host synchronisation) or ``"auto"``: CuPy only for CUDA tensors
            with n > 32 under torch < 2.12, whose ``eigh`` loops over the batch there (pytorch
            issue 175585), and only when CuPy works; torch everywhere else. From torch 2.12
            ``eigh`` is reported batched for every n (pytorch issue 192483, PR 175403); no
            measurement in this package shows CuPy ahead there, so "auto" keeps torch. Ask
            for ``"cupy"`` to avoid torch's host synchronisation.
        subgradient: which element of the Clarke subdifferential the backward pass returns:
            ``"eigenvector"`` — q qᵀ for the solver's k-th eigenvector (the gradient wherever λ_k
            is simple); ``"mean"`` — U Uᵀ / r over the r eigenvectors of λ_k's cluster: the
            run of consecutive (ascending) eigenvalues, each within ``cluster_tol`` of the
            next, that holds λ_k. At an exact tie this is the minimum-norm element of ∂λ_k,
            independent of the basis the solver picked inside the repeated eigenvalue.
        cluster_tol: largest gap between consecutive eigenvalues of one cluster for
            ``"mean"`` (absolute, in the units of A); default :func:`default_cluster_tol`
            (3 · eps · √max(n, 16) · max|λ| per matrix: 1.5 times the largest gap rounding
            was measured to open between copies of an exact tie, below the gaps the solver
            resolves). What a tolerance ε of your own returns: if the cluster's computed
            eigenvalues span δ ≤ (r − 1) · ε, then U Uᵀ / r is a Goldstein δ-subgradient —
            an average of gradients of λ_k at matrices within spectral distance δ of A (those
            with the cluster's eigenvalues pulled apart), as in gradient sampling
            (Burke–Lewis–Overton 2005) — and not, in general, a Clarke subgradient at A,
            where λ_k may be differentiable with gradient q qᵀ. A tolerance below the
            default may split an exact tie: the result is then q qᵀ for some q of the tie, a
            Clarke subgradient but not the minimum-norm one.
        steps: inverse-iteration steps for ``method="inverse_iteration"`` (default 3).

    Returns:
        ``(...)`` tensor of k-th eigenvalues, NaN for batch entries whose read triangle holds
        NaN or Inf or on which the solver reports failure (and a NaN gradient for them).

    Raises:
        TypeError: ``A`` not a tensor or not float32/float64; ``k``/``steps`` not an int;
            ``lower`` not a bool; ``cluster_tol`` not a number.
        ValueError: ``A`` with fewer than 2 dims or not square; unknown ``method``,
            ``backend`` or ``subgradient``; ``"mean"`` with a method other than "eigh"/"auto";
            ``backend="cupy"`` on a non-CUDA tensor; ``method="subset"`` off the CPU; bad
            ``cluster_tol`` or ``steps``, or either given where it is not used.
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
    if not torch.compiler.is_compiling():
        _refuse_unsupported_transforms(A)
    resolved = _resolve_backend(backend, A)
    grad = torch.is_grad_enabled() and _requires_grad(A)
    how = _resolve_method(method, A, resolved, subgradient, grad)
    if grad:
        tol = -1.0 if cluster_tol is None else float(cluster_tol)
        n_steps = 3 if steps is None else operator.index(steps)
        lam, _ = _factor_op(A, k, lower, resolved, how, subgradient, tol, n_steps)
        return lam
    return _value_op(A, k, lower, resolved, how)
