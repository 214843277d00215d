"""One SOAP step: Adam in the eigenbasis of Shampoo's Kronecker factors, KL-Shampoo updates.

For an m×n weight with gradient G, SOAP (Vyas et al., arXiv 2409.11321) keeps factors
L ≈ E[G Gᵀ] and R ≈ E[Gᵀ G] and runs Adam in the coordinates of their eigenbases Q_L, Q_R.
KL-Shampoo (Lin et al., arXiv 2509.03378) whitens each factor's update by the other factor:

    L ← β L + (1 − β)/n · G Q_R Λ_R⁻¹ Q_Rᵀ Gᵀ,     R ← β R + (1 − β)/m · Gᵀ Q_L Λ_L⁻¹ Q_Lᵀ G

with Λ = diag(Qᵀ F Q), the *approximate* eigenvalues of F in its current basis, clamped below
by ε. REKLS refreshes the basis by ``eigh`` every step; SOAP by orthogonal iteration. The
four stages below follow NVIDIA Emerging-Optimizers 0.3.0's order of operations.

This file needs only torch: copy it alone into a project, or run it to see an example.

Example:
    >>> import torch
    >>> w = torch.zeros(4, 3)
    >>> state = init_state(w)
    >>> soap_step(w, torch.ones(4, 3), state, lr=0.1)
    >>> state["step"], round(w[0, 0].item(), 4)  # Adam's first step: about lr per entry
    (1, -0.11)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

__all__ = [
    "adam_direction",
    "approximate_eigenvalues",
    "eigh_descending",
    "factor_targets",
    "init_state",
    "kl_whitener",
    "refresh_bases",
    "soap_step",
]

Matmul = Callable[[Tensor, Tensor], Tensor]


def approximate_eigenvalues(factor: Tensor, basis: Tensor, matmul: Matmul = torch.matmul) -> Tensor:
    """diag(Qᵀ F Q) as a row-sum of (Qᵀ F) ∘ Qᵀ: n² work instead of n³ for the full product."""
    # [show:approx]
    return (matmul(basis.T, factor) * basis.T).sum(dim=1)
    # [/show:approx]


def kl_whitener(
    basis: Tensor, approx: Tensor, floor: float | Tensor, size: int, matmul: Matmul = torch.matmul
) -> Tensor:
    """Q diag(1 / max(λ̃, floor)) Qᵀ / size: the other side's inverse factor, per row or column."""
    # [show:whitener]
    scale = approx.clamp_min(floor).reciprocal() / size
    return matmul(basis * scale.to(basis.dtype)[None, :], basis.T)
    # [/show:whitener]


def factor_targets(
    grad: Tensor,
    whiteners: tuple[Tensor, Tensor] | None = None,
    matmul: Matmul = torch.matmul,
) -> tuple[Tensor, Tensor]:
    """What L and R move towards: G Gᵀ and Gᵀ G, or with KL-Shampoo's whiteners (W_L, W_R)
    G W_R Gᵀ and Gᵀ W_L G (each factor whitened by the *other* one)."""
    if whiteners is None:
        return matmul(grad, grad.T), matmul(grad.T, grad)
    # [show:kl]
    w_left, w_right = whiteners
    return matmul(matmul(grad, w_right), grad.T), matmul(matmul(grad.T, w_left), grad)
    # [/show:kl]


def eigh_descending(factor: Tensor) -> Tensor:
    """The eigenvectors of a symmetric factor, largest eigenvalue first."""
    try:
        _, vectors = torch.linalg.eigh(factor)
    except (torch.linalg.LinAlgError, RuntimeError):
        # As the library does: retry a failed float32 decomposition in float64.
        _, vectors = torch.linalg.eigh(factor.double())
        vectors = vectors.to(factor.dtype)
    return vectors.flip(-1)


def refresh_bases(
    state: dict[str, Any],
    approx: tuple[Tensor, Tensor],
    use_eigh: bool,
    power_iter_steps: int = 1,
) -> None:
    """Stage 2, in place: sort each basis by its approximate eigenvalues ``approx`` (L's, R's),
    permute Adam's second moment to match, refresh Q_L and Q_R (``eigh``, or orthogonal
    iteration Q ← qr(F Q)) and carry the first moment into the new bases."""
    Q_L, Q_R = state["Q_L"], state["Q_R"]
    momentum = Q_L @ state["exp_avg"] @ Q_R.T  # back to the parameter's coordinates
    second = state["exp_avg_sq"]
    bases = []
    for axis, (factor, basis) in enumerate(((state["L"], Q_L), (state["R"], Q_R))):
        order = torch.argsort(approx[axis], descending=True)
        basis = basis[:, order]
        second = second.index_select(axis, order)
        if use_eigh:
            basis = eigh_descending(factor)
        else:
            for _ in range(power_iter_steps):
                basis = torch.linalg.qr(factor @ basis).Q
        bases.append(basis)
    state["Q_L"], state["Q_R"] = bases
    state["exp_avg"] = bases[0].T @ momentum @ bases[1]
    state["exp_avg_sq"] = second


def adam_direction(
    state: dict[str, Any],
    g: Tensor,
    betas: tuple[float, float],
    eps: float,
    t: int,
    correct_bias: bool = True,
    nesterov: bool = False,
) -> Tensor:
    """Stage 3: Adam's moments updated in place with the rotated gradient ``g``; its step."""
    beta1, beta2 = betas
    m = state["exp_avg"] = state["exp_avg"].lerp(g, 1.0 - beta1)
    v = state["exp_avg_sq"] = state["exp_avg_sq"].lerp(g.square(), 1.0 - beta2)
    c1 = 1.0 - beta1**t if correct_bias else 1.0
    c2 = 1.0 - beta2**t if correct_bias else 1.0
    if nesterov:
        c_next = 1.0 - beta1 ** (t + 1) if correct_bias else 1.0
        numerator = beta1 * m / c_next + (1.0 - beta1) * g / c1
    else:
        numerator = m / c1
    return numerator / ((v / c2).sqrt() + eps)


def init_state(p: Tensor, dtype: torch.dtype | None = None) -> dict[str, Any]:
    """Zero factors and moments, identity bases, for an m×n parameter ``p``."""
    m, n = p.shape
    kw = {"device": p.device, "dtype": dtype or p.dtype}
    return {
        "step": 0,
        "exp_avg": torch.zeros(m, n, **kw),
        "exp_avg_sq": torch.zeros(m, n, **kw),
        "L": torch.zeros(m, m, **kw),
        "R": torch.zeros(n, n, **kw),
        "Q_L": torch.eye(m, **kw),
        "Q_R": torch.eye(n, **kw),
    }


@torch.no_grad()
def soap_step(
    p: Tensor,
    grad: Tensor,
    state: dict[str, Any],
    lr: float,
    betas: tuple[float, float] = (0.9, 0.95),
    shampoo_beta: float = 0.95,
    eps: float = 1e-8,
    use_eigh: bool = True,
    use_kl_shampoo: bool = True,
) -> None:
    """One step of SOAP (REKLS with the defaults) on ``p``, in place; no weight decay."""
    t = state["step"] + 1
    beta = 1.0 - (1.0 - shampoo_beta) / (1.0 - shampoo_beta**t)  # bias-corrected EMA
    whiteners = None
    if use_kl_shampoo:  # both from the factors *before* either is updated
        sides = ((state["L"], state["Q_L"]), (state["R"], state["Q_R"]))
        whiteners = tuple(
            kl_whitener(basis, approximate_eigenvalues(factor, basis), eps, grad.shape[side])
            for side, (factor, basis) in enumerate(sides)
        )
    new_L, new_R = factor_targets(grad, whiteners)  # 1. the factors
    state["L"], state["R"] = state["L"].lerp(new_L, 1.0 - beta), state["R"].lerp(new_R, 1.0 - beta)
    approx = tuple(
        approximate_eigenvalues(state[f], state[q]) for f, q in (("L", "Q_L"), ("R", "Q_R"))
    )
    refresh_bases(state, approx, use_eigh or t == 1)  # 2. the bases
    Q_L, Q_R = state["Q_L"], state["Q_R"]
    direction = adam_direction(state, Q_L.T @ grad @ Q_R, betas, eps, t)  # 3. Adam there
    p.sub_(lr * (Q_L @ direction @ Q_R.T))  # 4. back to the parameter's coordinates
    state["step"] = t


if __name__ == "__main__":
    g = torch.Generator().manual_seed(0)
    target = torch.randn(32, 16, generator=g)
    w, state = torch.zeros(32, 16), None
    state = init_state(w)
    for _ in range(200):
        x = torch.randn(64, 16, generator=g)
        grad = (x @ (w - target).T).T @ x / 64  # least squares: ½‖x Wᵀ − x W*ᵀ‖² / batch
        soap_step(w, grad, state, lr=0.03)
    print(f"REKLS: relative error after 200 steps {((w - target).norm() / target.norm()):.3f}")
