"""The two custom ops behind :func:`eigprec.eig.kth_eigvalsh` and their autograd.

Built on :mod:`eigprec.eig.core` (the Clarke factor and gradient); adds other solvers
(LAPACK's subset driver, inverse iteration, CuPy), NaN/Inf batch entries, ``torch.compile``,
``torch.func`` transforms and second derivatives. ``kth_eigvalsh_value`` computes λ_k alone;
``kth_eigvalsh_factor`` computes λ_k and a factor F with F Fᵀ the chosen element of ∂λ_k.
Both accept any leading batch shape and have fake kernels, so ``torch.compile`` traces them
without a graph break. Eager autograd goes through :class:`KthEigvalsh` (an
``autograd.Function``, which ``torch.func`` understands: ``grad``, ``vmap``, ``jvp``, and
second derivatives through :class:`KthGradient`); a compiled graph uses the op's own
first-order autograd registration.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

from eigprec.eig import cupy_solver, inverse_iteration, lapack
from eigprec.eig.core import (
    clarke_factor,
    clarke_gradient,
    cluster_weights,
    tolerance_scale,
)

__all__ = [
    "KthEigvalsh",
    "KthGradient",
    "apply_eager",
    "factor",
    "factor_impl",
    "factor_op",
    "isolated",
    "value_impl",
    "value_op",
]


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
        return cupy_solver.eigvalsh(A, lower)
    return torch.linalg.eigvalsh(A, UPLO="L" if lower else "U")


def _eigh(A: Tensor, lower: bool, backend: str) -> tuple[Tensor, Tensor]:
    if backend == "cupy":
        return cupy_solver.eigh(A, lower)
    w, V = torch.linalg.eigh(A, UPLO="L" if lower else "U")
    return w, V


# --------------------------------------------------------------------------- custom ops


def _decoded(cluster_tol: float) -> tuple[float, bool] | None:
    """The op's one float tolerance argument decoded: None for the default rule, else
    ``(value, relative)``.

    NaN: the default rule (:func:`eigprec.eig.core.cluster_breaks`); ≥ 0: that absolute
    tolerance; < 0: the relative tolerance ``cluster_rtol`` = ``-cluster_tol``, which
    ``relative`` says to multiply by each matrix's max|λ|.
    """
    if math.isnan(cluster_tol):
        return None
    return (-cluster_tol, True) if cluster_tol < 0 else (cluster_tol, False)


def _tolerance(w: Tensor, cluster_tol: float) -> Tensor | float | None:
    """The cluster tolerance, a Python float or ``(..., 1)`` per matrix; None: the default.

    A user's absolute tolerance stays a Python scalar: turning it into a CUDA tensor would be
    a blocking host-to-device copy.
    """
    decoded = _decoded(cluster_tol)
    if decoded is None:
        return None
    value, relative = decoded
    return value * w.abs().amax(dim=-1, keepdim=True) if relative else value


def _mean_weights(A: Tensor, w: Tensor, V: Tensor, k: int, lower: bool, cluster_tol: float):
    """The weights of U Uᵀ / r (:func:`eigprec.eig.core.cluster_weights`) for the op's tolerance."""
    return cluster_weights(w, V, k, A if lower else A.mT, _tolerance(w, cluster_tol))


def value_impl(A: Tensor, k: int, lower: bool, backend: str, method: str) -> Tensor:
    """λ_k only: the no-grad path forms no eigenvectors, except where they give the value.

    ``"eigh"`` takes the value from the solver that computes eigenvectors, as with a gradient:
    torch's eigenvalue-only solver is less accurate in float32 (1e-6 against 4e-7 of max|λ|
    at n = 32; issue 49), and a value should not change with ``requires_grad``.
    """
    if method == "subset" and A.device.type == "cpu":
        screened = lapack.kth_eigenpair(A, k, lower, vectors=False, screen=True)
        if screened is not None:
            return screened[0]
    A_clean, bad = _sanitise(A, lower)
    if method == "subset":
        lam = lapack.kth_eigenpair(A_clean, k, lower, vectors=False)[0]
    elif method == "eigh":
        lam = _eigh(A_clean, lower, backend)[0][..., k].clone()
    else:
        lam = _eigvalsh(A_clean, lower, backend)[..., k].clone()
    return _nan_where(bad, lam, 0)


value_op = torch.library.custom_op("eigprec::kth_eigvalsh_value", mutates_args=())(value_impl)


@value_op.register_fake
def _(A: Tensor, k: int, lower: bool, backend: str, method: str) -> Tensor:
    return A.new_empty(A.shape[:-2])


def factor_impl(
    A: Tensor,
    k: int,
    lower: bool,
    backend: str,
    method: str,
    subgradient: str,
    cluster_tol: float,
    steps: int,
) -> tuple[Tensor, Tensor]:
    """λ_k and a factor F with F Fᵀ the chosen element of ∂λ_k (``cluster_tol``: see _tolerance)."""
    return factor(A, k, lower, backend, method, subgradient, cluster_tol, steps, compact=False)


def factor(A, k, lower, backend, method, subgradient, cluster_tol, steps, *, compact: bool):
    """λ_k and F (:func:`factor_impl`); ``compact``: ``"mean"``'s F keeps only its clusters'
    columns on the CPU (eager autograd; the op's fake kernel promises n columns)."""
    if method == "subset" and A.device.type == "cpu":  # finite batches: no torch-level screen
        screened = lapack.kth_eigenpair(A, k, lower, vectors=True, screen=True)
        if screened is not None:
            return screened[0], screened[1][..., None]  # type: ignore[index]
    A_clean, bad = _sanitise(A, lower)
    # [show:methods]
    if method == "subset":  # one eigenpair from LAPACK's subset driver (CPU)
        lam, q = lapack.kth_eigenpair(A_clean, k, lower, vectors=True)
        F = q[..., None]
    elif method == "inverse_iteration":  # all eigenvalues, then one eigenpair
        shift = _eigvalsh(A_clean, lower, backend)[..., k]
        lam, q = inverse_iteration.eigenpair(A_clean, shift, lower, steps)
        F = q[..., None]
    # [/show:methods]
    else:
        w, V = _eigh(A_clean, lower, backend)
        lam = w[..., k]
        if subgradient == "eigenvector":
            F = clarke_factor(w, V, k, subgradient)
        elif compact and A.device.type == "cpu" and isolated(w, k, cluster_tol):
            F = V[..., :, k : k + 1]  # a cluster of one everywhere: U Uᵀ / r = q qᵀ
        else:  # U Uᵀ / r, as core.clarke_factor, with the op's encoding of the tolerance
            weights = _mean_weights(A_clean, w, V, k, lower, cluster_tol)
            # (below n = 32 the n³ product costs less than finding the columns)
            if compact and A.device.type == "cpu" and A.shape[-1] >= 32:
                F = _cluster_columns(V, weights)
            else:
                F = V * weights.sqrt()[..., None, :]
    return _nan_where(bad, lam.clone(), 0), _nan_where(bad, F.contiguous(), 2)


# (dtype, n) -> tolerance_scale(w, refined=False): the plain rule's unit, asked per call.
_PLAIN_SCALES: dict[tuple[torch.dtype, int], float] = {}


def isolated(w: Tensor, k: int, cluster_tol: float) -> bool:
    """Whether λ_k is a cluster of one in every batch entry, from the computed gaps beside it.

    The default rule breaks wherever the computed gap exceeds the plain tolerance, whatever
    the refined gap (:func:`eigprec.eig.core.cluster_breaks`); a user's tolerance is
    compared with computed gaps alone. For CPU eigenvalues sorted ascending, as ``eigh``
    returns them (its callers: the eager CPU forward of ``"mean"`` and
    :func:`eigprec.eig.kth._thin`); no torch operator runs: beside a small ``eigh`` each one
    costs a few %. A small batch under the default rule is read into Python floats
    (``tolist``); a larger one, or a given tolerance, is decided in NumPy in ``w``'s
    precision, as torch operators would decide it (at 64 × 8 eight of them took 61 µs, the
    NumPy step 21 µs; issue 49). A ``w`` off the CPU is not refused here: a small one is read
    through the host (a synchronisation), a larger one fails in ``Tensor.numpy``.
    """
    shape = w.shape
    n = shape[-1]
    decoded = _decoded(cluster_tol)
    if decoded is None and len(shape) <= 2 and n * (shape[0] if len(shape) == 2 else 1) <= 128:
        key = (w.dtype, n)
        scale = _PLAIN_SCALES.get(key)
        if scale is None:
            scale = _PLAIN_SCALES[key] = tolerance_scale(w, refined=False)
        values = w.tolist()
        for row in values if len(shape) == 2 else (values,):
            tol = scale * max(-row[0], row[-1])  # max|λ|: w is sorted
            if (k > 0 and row[k] - row[k - 1] <= tol) or (k + 1 < n and row[k + 1] - row[k] <= tol):
                return False
        return True
    lo, hi = max(k - 1, 0), min(k + 2, n)
    if hi - lo < 2:
        return True
    a = w.detach().numpy()
    value, relative = (tolerance_scale(w, refined=False), True) if decoded is None else decoded
    tol = value * np.abs(a).max(axis=-1, keepdims=True) if relative else a.dtype.type(value)
    near = a[..., lo:hi]
    return bool((near[..., 1:] - near[..., :-1] > tol).all())


def _cluster_columns(V: Tensor, weights: Tensor) -> Tensor:
    """``(..., n, R)`` columns of ``V`` scaled by √weights, R the largest cluster in the batch.

    The same F Fᵀ as ``V · diag(√weights)`` (a cluster is a run of consecutive columns), with
    R columns instead of n: the backward pass's product costs n² R instead of n³, and with
    R = 1 it is the eigenvector's exact outer product. Asks the host for R: CPU only.
    """
    inside = weights > 0
    r = inside.sum(dim=-1, keepdim=True)
    width = int(r.max()) if r.numel() else 1
    offsets = torch.arange(width, device=V.device)
    first = inside.to(torch.int8).argmax(dim=-1, keepdim=True)
    index = (first + offsets).clamp_max(V.shape[-1] - 1)
    columns = V.gather(-1, index[..., None, :].expand(*V.shape[:-1], width))
    scale = torch.where(offsets < r, weights.gather(-1, index), weights.new_zeros(()))
    return columns * scale.sqrt()[..., None, :]


factor_op = torch.library.custom_op("eigprec::kth_eigvalsh_factor", mutates_args=())(factor_impl)


@factor_op.register_fake
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
    """First-order backward of the op itself: what a ``torch.compile`` d graph runs."""
    (F,) = ctx.saved_tensors
    # Grad mode is on in a backward pass only under create_graph=True, i.e. when someone
    # will differentiate this gradient: refuse rather than return a graph without dq/dA.
    # (Eager code reaches second derivatives through KthGradient instead.)
    if torch.is_grad_enabled():
        raise NotImplementedError(
            "kth_eigvalsh under torch.compile provides first derivatives only (called with "
            "create_graph=True); second derivatives work in eager mode."
        )
    # [show:backward]
    grad_A = clarke_gradient(F, grad_lam)  # grad_lam · F Fᵀ
    # [/show:backward]
    return grad_A, None, None, None, None, None, None, None


factor_op.register_autograd(_factor_backward, setup_context=_factor_setup)


def _move_batch_front(A: Tensor, bdim: int | None) -> Tensor:
    return A if bdim is None else A.movedim(bdim, 0)


# The ops already accept any leading batch shape, so vmap only has to move its dimension to
# the front and declare it there.
@value_op.register_vmap
def _(info, in_dims, A: Tensor, k: int, lower: bool, backend: str, method: str):
    bdim = in_dims[0]
    out = value_op(_move_batch_front(A, bdim), k, lower, backend, method)
    return out, (None if bdim is None else 0)


@factor_op.register_vmap
def _(info, in_dims, A, k, lower, backend, method, subgradient, cluster_tol, steps):
    bdim = in_dims[0]
    out = factor_op(
        _move_batch_front(A, bdim), k, lower, backend, method, subgradient, cluster_tol, steps
    )
    dim = None if bdim is None else 0
    return out, (dim, dim)


# --------------------------------------------------------------------------- autograd.Function


def _weights_and_basis(A: Tensor, k: int, lower: bool, subgradient: str, cluster_tol: float):
    """Eigenvalues w, eigenvectors V (differentiably, through torch.linalg.eigh) and the
    weights ω with F Fᵀ = V diag(ω) Vᵀ: e_k for "eigenvector", the cluster's 1/r for "mean"."""
    A_clean, bad = _sanitise(A, lower)
    w, V = torch.linalg.eigh(A_clean, UPLO="L" if lower else "U")
    if subgradient == "eigenvector":
        omega = torch.zeros_like(w.detach())
        omega[..., k] = 1.0
    else:  # the same clusters as the forward pass
        omega = _mean_weights(A_clean.detach(), w.detach(), V.detach(), k, lower, cluster_tol)
    return w, V, omega, bad


def _divided_differences(w: Tensor, omega: Tensor) -> Tensor:
    """Γ_ij = (ω_i − ω_j) / (λ_i − λ_j), 0 where ω_i = ω_j (Daleckii–Krein).

    The derivative of A ↦ V diag(ω) Vᵀ, with ω constant on each cluster, along a symmetric E
    is V (Γ ∘ Vᵀ E V) Vᵀ. For ω = e_k this is d(q qᵀ), and ⟨E, d(q qᵀ)[E]⟩ is the Hessian term
    Σ_{j≠k} 2 (q_jᵀ E q_k)² / (λ_k − λ_j); at a tie inside a cluster Γ is 0 (the cluster's
    average is smooth there), across a tie between ω's that differ it is infinite, as the
    second derivative of torch.linalg.eigh is.
    """
    d_omega = omega[..., :, None] - omega[..., None, :]
    d_lam = w[..., :, None] - w[..., None, :]
    same = d_omega == 0
    return torch.where(same, torch.zeros((), dtype=w.dtype), d_omega / torch.where(same, 1, d_lam))


def _second_order(A, F, grad_lam, E, k, lower, subgradient, cluster_tol) -> Tensor:
    """grad_lam · d(F Fᵀ)[E], the derivative of the first-order gradient along E."""
    w, V, omega, bad = _weights_and_basis(A, k, lower, subgradient, cluster_tol)
    E = (E + E.mT) / 2
    inner = _divided_differences(w, omega) * (V.mT @ E @ V)
    out = (V @ inner @ V.mT) * grad_lam[..., None, None]
    out = _nan_where(bad, out, 2)
    return torch.where((grad_lam == 0)[..., None, None], out.new_zeros(()), out)


class KthGradient(torch.autograd.Function):
    """(A, F, grad_lam) ↦ grad_lam · F Fᵀ, differentiable in A and grad_lam.

    Its backward (and forward derivative) recomputes the eigendecomposition with
    ``torch.linalg.eigh``: only a second derivative pays for it.
    """

    generate_vmap_rule = True

    @staticmethod
    def forward(A, F, grad_lam, k, lower, subgradient, cluster_tol):
        return clarke_gradient(F, grad_lam)

    @staticmethod
    def setup_context(ctx, inputs, output):
        A, F, grad_lam, *args = inputs
        ctx.save_for_backward(A, F, grad_lam)
        ctx.save_for_forward(A, F, grad_lam)
        ctx.args = args

    @staticmethod
    def backward(ctx, grad_out):
        A, F, grad_lam = ctx.saved_tensors
        k, lower, subgradient, cluster_tol = ctx.args
        # ⟨Ḡ, grad_lam · d(F Fᵀ)[E]⟩ = ⟨grad_lam · d(F Fᵀ)[sym Ḡ], E⟩ (the map is self-adjoint).
        grad_A = _second_order(A, F, grad_lam, grad_out, k, lower, subgradient, cluster_tol)
        grad_g = ((grad_out @ F) * F).sum(dim=(-2, -1))
        return grad_A, None, grad_g, None, None, None, None

    @staticmethod
    def jvp(ctx, A_t, F_t, g_t, *_):
        A, F, grad_lam = ctx.saved_tensors
        k, lower, subgradient, cluster_tol = ctx.args
        out = _second_order(A, F, grad_lam, A_t, k, lower, subgradient, cluster_tol)
        return out + clarke_gradient(F, g_t) if g_t is not None else out


class KthEigvalsh(torch.autograd.Function):
    """(A, k, …) ↦ (λ_k, F): the eager autograd of :func:`factor_op`, transform-aware.

    Backward: grad_lam · F Fᵀ, through :class:`KthGradient` where it will be differentiated
    again (``create_graph=True``, ``torch.func``). Forward derivative: ⟨F Fᵀ, Ȧ⟩, the
    directional derivative of λ_k at a simple eigenvalue and, at a tie, ⟨G, Ȧ⟩ for the same
    element G the backward returns.
    """

    @staticmethod
    def forward(A, k, lower, backend, method, subgradient, cluster_tol, steps):
        if torch._C._are_functorch_transforms_active():
            return factor_op(A, k, lower, backend, method, subgradient, cluster_tol, steps)
        # Eager: the implementation itself, without the custom op's dispatch (issue 49).
        return factor(A, k, lower, backend, method, subgradient, cluster_tol, steps, compact=True)

    @staticmethod
    def vmap(info, in_dims, A, *args):
        # Batched already: move vmap's dimension to the front and run once.
        bdim = in_dims[0]
        out = KthEigvalsh.apply(_move_batch_front(A, bdim), *args)
        dim = None if bdim is None else 0
        return out, (dim, dim)

    @staticmethod
    def setup_context(ctx, inputs, output):
        A, k, lower, _, _, subgradient, cluster_tol, _ = inputs
        _, F = output
        ctx.mark_non_differentiable(F)
        ctx.save_for_backward(F)
        ctx.save_for_forward(F)
        # A serves second derivatives only. Kept outside save_for_backward, whose version check
        # would fail a first-order backward after an in-place edit of A, which
        # torch.linalg.eigvalsh survives (it saves its outputs); a second derivative checks
        # the version itself.
        ctx.A, ctx.A_version = A, A._version
        ctx.args = (k, lower, subgradient, cluster_tol)

    @staticmethod
    def backward(ctx, grad_lam, grad_F):
        (F,) = ctx.saved_tensors
        if not torch.is_grad_enabled():  # first order: nothing will differentiate this
            return clarke_gradient(F, grad_lam), None, None, None, None, None, None, None
        if ctx.A._version != ctx.A_version:
            raise RuntimeError(
                "kth_eigvalsh: A was modified in place after the call; first derivatives "
                "survive that, second derivatives (create_graph=True, torch.func) need A as "
                "it was: clone it before the in-place edit"
            )
        grad_A = KthGradient.apply(ctx.A, F, grad_lam, *ctx.args)
        return grad_A, None, None, None, None, None, None, None

    @staticmethod
    def jvp(ctx, A_t, *_):
        (F,) = ctx.saved_tensors
        return ((A_t @ F) * F).sum(dim=(-2, -1)), None


#: ``autograd.Function.apply`` without its per-call ``inspect.signature`` binding (it binds
#: to fill in defaults, and KthEigvalsh.forward has none): for eager calls outside torch.func
#: transforms with every argument given. Inside transforms the full ``apply`` runs.
apply_eager = super(torch.autograd.Function, KthEigvalsh).apply
