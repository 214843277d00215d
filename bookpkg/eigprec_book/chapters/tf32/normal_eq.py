"""The TF32 chapter's end-to-end example: least squares through the normal equations.

``x = solve(AᵀA, Aᵀb)`` squares the condition number of ``A``, so a TF32 error in the
Gram matrix ``AᵀA`` can move ``x`` more than its own size suggests. The per-product audit
(:func:`~eigprec.audit.tf32_audit`) measures each product's own error; the A/B
attribution (:func:`~eigprec.audit.tf32_attribution`) measures what each product's
rounding alone does to ``x``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from eigprec._args import check_int
from eigprec.audit import Attribution, tf32_attribution, tf32_audit
from eigprec.precision import matmul_precision
from eigprec.tf32 import emulate_tf32

__all__ = ["NormalEquationsResult", "normal_equations_ab", "normal_equations_problem"]


def normal_equations_problem(
    m: int = 2000, n: int = 50, cond: float = 10.0, seed: int = 0, vector_b: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """A float32 least-squares problem ``A`` (m×n, condition number ``cond``) and ``b`` (m×1).

    ``A = U diag(s) Vᵀ`` with ``U`` and ``V`` the orthonormal QR factors of standard normal
    float64 matrices and ``s`` log-spaced from 1 to ``1/cond``; ``b`` is standard normal
    (so most of it is residual: ``Aᵀb`` is a sum with cancellation).

    Args:
        m: rows (m ≥ n).
        n: columns.
        cond: the condition number of ``A`` (≥ 1).
        seed: seed of the generator.
        vector_b: return ``b`` as a vector (m,) instead of an m×1 matrix. Then ``Aᵀb`` is a
            matrix-vector product, which TF32 does not touch (cuBLAS runs it under a
            ``NoTF32Guard``): only ``AᵀA`` is rounded.

    Returns:
        ``(A, b)`` in float32.

    Raises:
        TypeError: if m, n or seed is not an int, or vector_b not a bool.
        ValueError: if ``m < n``, ``n < 1`` or ``cond < 1``.

    Example:
        >>> a, b = normal_equations_problem(m=40, n=4)
        >>> tuple(a.shape), tuple(b.shape), a.dtype
        ((40, 4), (40, 1), torch.float32)
    """
    check_int("m", m, low=1)
    check_int("n", n, low=1)
    check_int("seed", seed, low=0)
    if not isinstance(vector_b, bool):
        raise TypeError(f"vector_b must be a bool, got {type(vector_b).__name__}")
    if m < n:
        raise ValueError(f"need m >= n, got m={m}, n={n}")
    if not cond >= 1:
        raise ValueError(f"cond must be >= 1, got {cond}")
    g = torch.Generator().manual_seed(seed)
    u, _ = torch.linalg.qr(torch.randn(m, n, generator=g, dtype=torch.float64))
    v, _ = torch.linalg.qr(torch.randn(n, n, generator=g, dtype=torch.float64))
    s = torch.logspace(0, -float(torch.log10(torch.tensor(cond))), n, dtype=torch.float64)
    b = torch.randn(m, 1, generator=g)
    return ((u * s) @ v.T).float(), b[:, 0] if vector_b else b


@dataclass(frozen=True)
class NormalEquationsResult:
    """What :func:`normal_equations_ab` returns.

    Attributes:
        error_fp32: ``‖x_fp32 − x‖/‖x‖`` against the float64 solution ``x``.
        error_tf32: the same with every product in (emulated) TF32.
        audit: ``(label, norm-wise TF32 error)`` per product, as the audit ranks them.
        attribution: the A/B :class:`~eigprec.audit.Attribution` for the output ``x``.
    """

    error_fp32: float
    error_tf32: float
    audit: list[tuple[str, float]]
    attribution: Attribution


def _label(shapes: tuple[tuple[int, ...], ...]) -> str:
    return "AᵀA" if len(shapes[1]) == 2 and shapes[1][-1] > 1 else "Aᵀb"


def normal_equations_ab(
    m: int = 2000, n: int = 50, cond: float = 10.0, seed: int = 0, vector_b: bool = False
) -> NormalEquationsResult:
    """Solve the normal equations in float32 and TF32; audit and attribute the products.

    Args:
        m: rows of ``A``.
        n: columns of ``A``.
        cond: condition number of ``A``.
        seed: seed of :func:`normal_equations_problem`.
        vector_b: ``b`` as a vector: ``Aᵀb`` is then a matrix-vector product in float32.

    Returns:
        A :class:`NormalEquationsResult`.

    Raises:
        TypeError, ValueError: as :func:`normal_equations_problem`.

    Example:
        >>> r = normal_equations_ab(m=200, n=5)
        >>> [label for label, _ in r.audit]
        ['Aᵀb', 'AᵀA']
    """
    a, b = normal_equations_problem(m, n, cond, seed, vector_b)
    a64, b64 = a.double(), b.double()
    exact = torch.linalg.solve(a64.T @ a64, a64.T @ b64)

    # [show:ab]
    def solve() -> dict[str, torch.Tensor]:
        gram, rhs = a.T @ a, a.T @ b
        # The solve itself at 'highest': on a TF32 GPU 'high' can change solves too (an
        # H200: inv and solve_triangular at n = 1024), which would mix with the products.
        with matmul_precision("highest"):
            return {"x": torch.linalg.solve(gram, rhs)}

    found = tf32_attribution(solve)  # ranks products by their effect on x
    # [/show:ab]
    with matmul_precision("highest"):
        x32 = solve()["x"]
    with matmul_precision("high"), emulate_tf32(force=True):
        xtf = solve()["x"]
    with tf32_audit(skip=("torch",)) as report:
        solve()

    def rel(x: torch.Tensor) -> float:
        return float((x.double() - exact).norm() / exact.norm())

    ranked = [(_label(r.shapes), float(r.norm_error)) for r in report.ranked("norm")]
    return NormalEquationsResult(rel(x32), rel(xtf), ranked, found)
