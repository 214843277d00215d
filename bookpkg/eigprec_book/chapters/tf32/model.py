"""Where the TF32 error of ``diag(QᵀLQ)`` comes from: rounding L, rounding Q, and a model.

The TF32 chapter separates the two operand roundings of ``Qᵀ @ L`` (round only L, only Q,
both), computed in float64 arithmetic so that nothing else rounds, and compares each with a
first-order model that accounts for what a cruder model leaves out: L is symmetric, so the
rounding errors of entries ``(j, k)`` and ``(k, j)`` are one and the same, and the relative
rounding error of TF32 operands is not uniform on ``[-u, u]``. It also measures the two
error terms of the 3xTF32 split.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from eigprec.tf32 import round_tf32, split_tf32
from eigprec_book.chapters.tf32.experiments import build_qtlq_problem, median

__all__ = [
    "TF32_UNIT_ROUNDOFF",
    "RoundingContributions",
    "log_log_slope",
    "model_agreement",
    "qtlq_rounding_contributions",
    "relative_rounding_spread",
    "split_error_stats",
]

#: TF32's unit roundoff: half the spacing 2**-10 at 1.
TF32_UNIT_ROUNDOFF = 2.0**-11


def relative_rounding_spread(x: torch.Tensor, rounding: str | None = None) -> float:
    """Size of TF32's rounding errors relative to the values: ``‖round(x) − x‖_F / ‖x‖_F``.

    This is the root-mean-square relative rounding error with each entry weighted by its
    squared magnitude -- the weighting with which the errors enter a product. For a
    relative error uniform on ``[-u, u]`` it would be ``u/√3``; real operands give less,
    because values with large mantissas (which round with small relative errors) are
    common and the weighting favours large entries.

    Args:
        x: float32 tensor with a nonzero entry.
        rounding: TF32 rounding (see :func:`~eigprec.tf32.round_tf32`).

    Returns:
        The ratio, a Python float.

    Raises:
        TypeError: if ``x`` is not float32.
        ValueError: if ``x`` is all zeros.

    Example:
        >>> x = torch.tensor([1 + 2**-12, 1.0])
        >>> relative_rounding_spread(x) == 2**-12 / (2 + 2**-11 + 2**-24) ** 0.5
        True
    """
    if not isinstance(x, torch.Tensor) or x.dtype != torch.float32:
        raise TypeError(f"x must be a float32 tensor, got {getattr(x, 'dtype', type(x))}")
    size = torch.linalg.vector_norm(x.double())
    if size == 0:
        raise ValueError("x has no nonzero entry")
    return float(torch.linalg.vector_norm(round_tf32(x, rounding).double() - x.double()) / size)


@dataclass(frozen=True)
class RoundingContributions:
    """What :func:`qtlq_rounding_contributions` returns (all tensors float64, length n).

    Attributes:
        eigenvalues: the true λ, descending.
        only_l: signed error of ``diag(Qᵀ L̃ Q)`` with only L rounded to TF32.
        only_q: signed error with only the first factor Qᵀ rounded.
        both: signed error with both rounded -- what a TF32 product does, less the float32
            accumulation.
        model_l: per-index standard deviation the model predicts for ``only_l``.
        model_q: per-index standard deviation the model predicts for ``only_q``.
        spread_l: :func:`relative_rounding_spread` of L.
        spread_q: :func:`relative_rounding_spread` of Q.
        frobenius: ``‖L‖_F`` (= ``‖λ‖₂``).
    """

    eigenvalues: torch.Tensor
    only_l: torch.Tensor
    only_q: torch.Tensor
    both: torch.Tensor
    model_l: torch.Tensor
    model_q: torch.Tensor
    spread_l: float
    spread_q: float
    frobenius: float

    @property
    def n(self) -> int:
        """The matrix size."""
        return self.eigenvalues.numel()


def qtlq_rounding_contributions(
    n: int = 128, seed: int = 0, rounding: str | None = None
) -> RoundingContributions:
    """Separate the errors of ``diag(QᵀLQ)`` caused by rounding L and by rounding Q to TF32.

    The chapter's problem (:func:`~eigprec_book.chapters.tf32.experiments.build_qtlq_problem`)
    is evaluated as ``((Q̃ᵀ @ L̃) * Qᵀ).sum(-1)`` in float64 arithmetic, with ``L̃`` and
    ``Q̃`` either the float32 data or its TF32 rounding; errors are measured against the
    same expression with nothing rounded, so that only the operand roundings act.

    The model, to first order: rounding L adds ``q_iᵀ δL q_i = Σ_jk q_ij q_ik δL_jk``. L
    is symmetric and so is its rounding, so each off-diagonal error appears twice; with
    independent errors of standard deviation ``s_L·|L_jk|`` (``s_L`` =
    :func:`relative_rounding_spread` of L) the variance is
    ``s_L² (2 Σ_jk q_ij² q_ik² L_jk² − Σ_j q_ij⁴ L_jj²)``, about ``2 s_L² ‖L‖_F² / n²``.
    Rounding Q adds ``δq_iᵀ L q_i = λ_i δq_iᵀ q_i`` (L q_i = λ_i q_i), of standard deviation
    ``λ_i s_Q (Σ_j q_ij⁴)^½``, about ``λ_i s_Q √(3/n)`` for a random orthogonal Q.

    Args:
        n: matrix size.
        seed: seed of the generator that draws Q.
        rounding: TF32 rounding.

    Returns:
        A :class:`RoundingContributions`.

    Example:
        >>> c = qtlq_rounding_contributions(n=32)
        >>> bool(c.only_q[0].abs() > c.only_q[-1].abs())  # scales with λ_i
        True
    """
    big_l, q, lam = build_qtlq_problem(n=n, seed=seed)
    l64, q64 = big_l.double(), q.double()
    l_tf32, q_tf32 = round_tf32(big_l, rounding).double(), round_tf32(q, rounding).double()

    def diag(first: torch.Tensor, middle: torch.Tensor) -> torch.Tensor:
        return ((first.T @ middle) * q64.T).sum(-1)

    exact = diag(q64, l64)
    spread_l = relative_rounding_spread(big_l, rounding)
    spread_q = relative_rounding_spread(q, rounding)
    w = q64.T.square()  # row i: q_ij²
    l_sq = l64.square()
    var_l = 2 * torch.einsum("ij,jk,ik->i", w, l_sq, w) - (w.square() * l_sq.diagonal()).sum(1)
    return RoundingContributions(
        eigenvalues=lam,
        only_l=diag(q64, l_tf32) - exact,
        only_q=diag(q_tf32, l64) - exact,
        both=diag(q_tf32, l_tf32) - exact,
        model_l=spread_l * var_l.sqrt(),
        model_q=spread_q * lam * w.square().sum(1).sqrt(),
        spread_l=spread_l,
        spread_q=spread_q,
        frobenius=float(torch.linalg.vector_norm(lam)),
    )


def log_log_slope(x: torch.Tensor, y: torch.Tensor) -> float:
    """Slope of the least-squares line through ``(log x, log y)``: the power of a power law.

    Fitted with LAPACK's QR driver (``gels``), which gives the same last bits for the same
    input at every call; the CPU default, ``gelsy``, did not (3 answers in 40 calls at 64
    points, other allocations between them), so a page that printed or guarded its slope
    differed between builds.

    Args:
        x: positive values, one dimension.
        y: positive values, the same shape.

    Returns:
        The slope.

    Raises:
        ValueError: if the shapes differ or are not one-dimensional, fewer than two points
            are given, or a value is not positive and finite.

    Example:
        >>> x = torch.tensor([1.0, 10.0, 100.0])
        >>> round(log_log_slope(x, 3 * x**-1), 6)
        -1.0
    """
    if x.shape != y.shape or x.dim() != 1:
        raise ValueError(
            f"x and y must be 1-D of one shape, got {tuple(x.shape)} and {tuple(y.shape)}"
        )
    if x.numel() < 2:
        raise ValueError(f"a slope needs at least two points, got {x.numel()}")
    if not bool(((x > 0) & (y > 0) & x.isfinite() & y.isfinite()).all()):
        raise ValueError("x and y must be positive and finite (their logarithms are fitted)")
    lx = x.log()
    design = torch.stack([lx, torch.ones_like(lx)], 1)
    return float(torch.linalg.lstsq(design, y.log()[:, None], driver="gels").solution[0, 0])


def split_error_stats(samples: int = 1 << 20, seed: int = 0) -> dict[str, float]:
    """The two error terms of 3xTF32, measured on random float32 values.

    Values ``x = m·2^e`` with ``m`` uniform in ``[1, 2)`` and ``e`` uniform in
    ``[-20, 20]`` (random signs) are split with :func:`~eigprec.tf32.split_tf32`.

    Args:
        samples: how many values (and products of pairs).
        seed: generator seed.

    Returns:
        ``split_max``: the largest ``|x − big − small| / |x|``; ``dropped_max`` and
        ``dropped_median``: the largest and median ``|a_small·b_small| / |a·b|`` over
        random pairs -- the term 3xTF32 leaves out.

    Example:
        >>> stats = split_error_stats(samples=4096)
        >>> stats["split_max"] <= 2**-23
        True
    """
    if samples < 2:
        raise ValueError(f"samples must be at least 2, got {samples}")
    gen = torch.Generator().manual_seed(seed)

    def draw() -> torch.Tensor:
        m = 1 + torch.rand(samples, generator=gen, dtype=torch.float64)
        e = torch.randint(-20, 21, (samples,), generator=gen, dtype=torch.float64)
        sign = torch.randint(0, 2, (samples,), generator=gen, dtype=torch.float64) * 2 - 1
        return (sign * m * 2.0**e).float()

    a, b = draw(), draw()
    a_big, a_small = split_tf32(a)
    _, b_small = split_tf32(b)
    a64 = a.double()
    loss = (a64 - a_big.double() - a_small.double()).abs() / a64.abs()
    dropped = (a_small.double() * b_small.double()).abs() / (a64 * b.double()).abs()
    return {
        "split_max": float(loss.max()),
        "dropped_max": float(dropped.max()),
        "dropped_median": median(dropped),
    }


def _median_ratio(errors: torch.Tensor, model: torch.Tensor) -> float:
    # Normal errors: the median of |e|/σ is the normal's third quartile, 0.674.
    return median(errors.abs() / model) / 0.6744897501960817


def model_agreement(c: RoundingContributions) -> dict[str, float]:
    """How well the model describes each contribution, and its closed-form constants.

    Args:
        c: output of :func:`qtlq_rounding_contributions`.

    Returns:
        ``l_ratio``/``q_ratio``: median of ``|error|/σ_model`` over the normal's 0.674, for
        rounding only L / only Q (1 = perfect); ``symmetric_factor``: ``√2·s_L/(u/√3)``,
        the factor between the model's typical L-error and the crude
        ``u‖L‖_F/(√3 n)``; ``l_closed``: ``√2·s_L·‖L‖_F/n``; ``q_closed_rel``:
        ``s_Q·√(3/n)``, the relative error of rounding Q.

    Example:
        >>> agreement = model_agreement(qtlq_rounding_contributions(n=32))
        >>> 0.5 < agreement["l_ratio"] < 2
        True
    """
    u = TF32_UNIT_ROUNDOFF
    return {
        "l_ratio": _median_ratio(c.only_l, c.model_l),
        "q_ratio": _median_ratio(c.only_q, c.model_q),
        "symmetric_factor": math.sqrt(2) * c.spread_l / (u / math.sqrt(3)),
        "l_closed": math.sqrt(2) * c.spread_l * c.frobenius / c.n,
        "q_closed_rel": c.spread_q * math.sqrt(3 / c.n),
    }
