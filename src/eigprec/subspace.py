"""Subspace geometry: principal angles, eigenvector clusters and the Davis–Kahan bound.

An eigenvector is only defined up to sign, and the eigenvectors of a repeated (or nearly
repeated) eigenvalue only up to a rotation inside their eigenspace. The quantities here are
invariant to exactly those ambiguities: principal angles between column spans, the angle
between two lines (not two vectors), and angles reported per cluster of eigenvalues that is
separated from the rest of the spectrum by a stated gap — the case in which the Davis–Kahan
sin θ theorem (Davis & Kahan, 1970) makes the subspace stable under perturbation.

All computations run in float64 whatever the input dtype, so the measuring instrument is
never the limiting precision. Bases are accepted when their columns are orthonormal to the
rounding of their own dtype (a tolerance that grows with the dtype's machine epsilon and
the number of rows) and are then re-orthonormalised in float64, so that this rounding slack
is not reported as an angle: identical spans give 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from eigprec._args import check_flag, check_int, check_real

__all__ = [
    "ClusterAngle",
    "cluster_angles",
    "davis_kahan_bound",
    "eigenvalue_clusters",
    "principal_angles",
    "subspace_angle",
    "top1_angle",
]

# Columns count as orthonormal when ‖AᵀA − I‖_max ≤ 32 · max(n, p) · eps(dtype): Householder
# QR and eigh bases sit near √n · eps, so a factor of 32 · n only refuses matrices that
# are not bases for their precision (a float32 basis scaled by 1 + 1e-3, say). The cap keeps
# the columns well conditioned (singular values within √(1 ± 0.1)) for bfloat16/float16,
# whose eps would otherwise allow anything.
_ORTHONORMAL_FACTOR = 32.0
_ORTHONORMAL_CAP = 0.1


def _as_float64_matrix(x: object, name: str) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.layout != torch.strided:
        raise TypeError(f"{name} must be a dense tensor, got a sparse one ({x.layout})")
    if x.device.type == "meta":
        raise ValueError(f"{name} is on the meta device (no data)")
    if not x.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got dtype {x.dtype}")
    if x.dim() == 1:
        x = x[:, None]
    if x.dim() != 2:
        raise ValueError(f"{name} must be a vector or a matrix, got shape {tuple(x.shape)}")
    if x.shape[0] == 0 or x.shape[1] == 0:
        raise ValueError(f"{name} must not be empty, got shape {tuple(x.shape)}")
    x = x.detach().to(device="cpu", dtype=torch.float64)
    if not torch.isfinite(x).all():
        raise ValueError(f"{name} contains NaN or inf")
    return x


def _check_orthonormal(x: torch.Tensor, name: str, dtype: torch.dtype) -> None:
    """Refuse ``x`` (float64) unless its columns are orthonormal to ``dtype``'s rounding."""
    if x.shape[1] > x.shape[0]:
        raise ValueError(
            f"{name} has more columns than rows ({tuple(x.shape)}); it cannot have "
            "orthonormal columns"
        )
    # At least float32's slack: a float64 copy of a float32 basis (what optimizers keep) is
    # common, and _angles re-orthonormalises, so that slack never shows as an angle.
    eps = max(torch.finfo(dtype).eps, torch.finfo(torch.float32).eps)
    tol = min(_ORTHONORMAL_FACTOR * x.shape[0] * eps, _ORTHONORMAL_CAP)
    defect = (x.T @ x - torch.eye(x.shape[1], dtype=x.dtype)).abs().max().item()
    if defect > tol:
        raise ValueError(
            f"{name} must have orthonormal columns; max |{name}ᵀ{name} − I| = {defect:.3g} "
            f"exceeds {tol:.3g}, the rounding slack allowed for {dtype} with {x.shape[0]} rows"
        )


def principal_angles_radians(A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """Principal angles in radians between the spans of two checked float64 bases."""
    # Re-orthonormalising in float64 keeps the same spans but removes the input dtype's
    # slack, which would otherwise appear as an angle (≈ 0.05° at a 1e-3 defect).
    A, B = torch.linalg.qr(A).Q, torch.linalg.qr(B).Q
    if B.shape[1] > A.shape[1]:
        A, B = B, A  # angles are symmetric; (I − AAᵀ)B below needs q ≤ p
    # [show:angles]
    cosines = torch.linalg.svdvals(A.T @ B).clamp(0.0, 1.0)  # descending
    from_cos = torch.arccos(cosines)  # ascending
    sines = torch.linalg.svdvals(B - A @ (A.T @ B)).clamp(0.0, 1.0).flip(0)  # ascending
    from_sin = torch.arcsin(sines)
    return torch.where(cosines > math.sqrt(0.5), from_sin, from_cos)
    # [/show:angles]


def _to_unit(angles: torch.Tensor, degrees: bool) -> torch.Tensor:
    return torch.rad2deg(angles) if degrees else angles


def principal_angles(A: torch.Tensor, B: torch.Tensor, degrees: bool = True) -> torch.Tensor:
    """Principal angles between the column spans of two orthonormal blocks.

    The cosines are the singular values of AᵀB, clamped to [0, 1] because rounding can push
    them just past 1. Angles below 45° are taken instead from the singular values of
    (I − AAᵀ)B (their sines), because arccos loses half the digits near cos = 1 and the
    small angles are the ones a precision study needs to resolve (Knyazev & Argentati's
    combination of the two).

    Args:
        A: ``(n, p)`` tensor with orthonormal columns (a vector is treated as one column):
            ``‖AᵀA − I‖_max ≤ 32 · n · eps(A.dtype)`` (at most 0.1). The columns are
            re-orthonormalised in float64 first, so identical spans give exactly 0.
        B: ``(n, q)`` tensor with orthonormal columns, likewise.
        degrees: Return degrees (default) instead of radians.

    Returns:
        The ``min(p, q)`` principal angles in ascending order, float64 on the CPU.

    Raises:
        TypeError: if ``A`` or ``B`` is not a floating-point tensor, or ``degrees`` not a bool.
        ValueError: on mismatched row counts, NaN/inf entries or non-orthonormal columns.

    Example:
        >>> import torch
        >>> e = torch.eye(3, dtype=torch.float64)
        >>> principal_angles(e[:, :2], e[:, 1:]).tolist()
        [0.0, 90.0]
    """
    degrees = check_flag("degrees", degrees)
    A64, B64 = _as_float64_matrix(A, "A"), _as_float64_matrix(B, "B")
    if A64.shape[0] != B64.shape[0]:
        raise ValueError(
            f"A and B must have the same number of rows, got {A64.shape} and {B64.shape}"
        )
    _check_orthonormal(A64, "A", A.dtype)
    _check_orthonormal(B64, "B", B.dtype)
    return _to_unit(principal_angles_radians(A64, B64), degrees)


def subspace_angle(A: torch.Tensor, B: torch.Tensor, k: int, degrees: bool = True) -> float:
    """Largest principal angle between the spans of the first ``k`` columns of A and B.

    Args:
        A: ``(n, p)`` orthonormal columns, ``p ≥ k`` (a vector is one column).
        B: ``(n, q)`` orthonormal columns, ``q ≥ k``.
        k: Number of leading columns to compare (a Python or NumPy integer).
        degrees: Degrees (default) or radians.

    Returns:
        The largest principal angle, a Python float.

    Raises:
        TypeError: if ``k`` is not an integer (bools are not), plus the errors of
            :func:`principal_angles`.
        ValueError: if ``k < 1`` or exceeds a column count, plus the errors of
            :func:`principal_angles`.

    Example:
        >>> import torch
        >>> q = torch.linalg.qr(torch.randn(6, 6, dtype=torch.float64)).Q
        >>> round(subspace_angle(q, q[:, [1, 0, 2, 3, 4, 5]], k=2), 6)
        0.0
    """
    k = check_int("k", k, low=1)
    degrees = check_flag("degrees", degrees)
    for name, x in (("A", A), ("B", B)):
        _as_float64_matrix(x, name)  # type, dtype and shape errors before any slicing
        columns = x.shape[1] if x.dim() == 2 else 1  # type: ignore[union-attr]
        if columns < k:
            raise ValueError(f"{name} has {columns} columns, fewer than k={k}")
    A_k = A[:, :k] if A.dim() == 2 else A
    B_k = B[:, :k] if B.dim() == 2 else B
    return principal_angles(A_k, B_k, degrees=degrees).max().item()


def top1_angle(a: torch.Tensor, b: torch.Tensor, degrees: bool = True) -> float:
    """Angle between the lines spanned by two vectors (or by the first columns of matrices).

    The sign of an eigenvector is arbitrary, so this is ``arccos |⟨a, b⟩| / (‖a‖‖b‖)``, in
    [0°, 90°]. Vectors need not be normalised.

    Args:
        a: A vector, or a matrix whose first column is used (a ``(1, n)`` matrix, whose
            first column has length 1, is refused: it is almost surely a row vector).
        b: Same, with the same length.
        degrees: Degrees (default) or radians.

    Returns:
        The angle as a Python float.

    Raises:
        TypeError: if an argument is not a floating-point tensor, or ``degrees`` not a bool.
        ValueError: on mismatched lengths, a one-row matrix, NaN/inf or a zero vector.

    Example:
        >>> import torch
        >>> round(top1_angle(torch.tensor([1.0, 0.0]), torch.tensor([-1.0, 1.0])), 9)
        45.0
    """
    degrees = check_flag("degrees", degrees)
    columns = []
    for name, x in (("a", a), ("b", b)):
        x64 = _as_float64_matrix(x, name)
        if x.dim() == 2 and x.shape[0] == 1 and x.shape[1] > 1:  # type: ignore[union-attr]
            raise ValueError(
                f"{name} is a {tuple(x.shape)} matrix with one row: its first column has "
                "length 1, so every angle would be 0; pass a vector or an (n, 1) column"
            )
        columns.append(x64[:, 0])
    u, v = columns
    if u.shape != v.shape:
        raise ValueError(f"a and b must have the same length, got {u.numel()} and {v.numel()}")
    mu, mv = u.abs().max(), v.abs().max()
    if mu == 0 or mv == 0:
        raise ValueError("a zero vector spans no line; its angle is undefined")
    # Scaled to max |entry| = 1 first: the norm of a vector near float64's range would
    # overflow (reporting 90°) and that of a subnormal one underflow to 0.
    u, v = u / mu, v / mv
    u, v = u / torch.linalg.vector_norm(u), v / torch.linalg.vector_norm(v)
    # atan2(‖u − (u·v)v‖, |u·v|) keeps full accuracy at both small and right angles.
    c = torch.dot(u, v)
    s = torch.linalg.vector_norm(u - c * v)
    angle = torch.atan2(s, c.abs())
    return _to_unit(angle, degrees).item()


def eigenvalue_clusters(eigenvalues: torch.Tensor, rel_gap: float) -> list[tuple[int, int]]:
    """Split a sorted spectrum into clusters separated by at least ``rel_gap · max|λ|``.

    The gap is measured relative to the spectral scale ``max|λ|`` because the perturbations of
    interest (rounding in a matrix product, a gradient spike) are proportional to the size of
    the whole matrix, not of the individual eigenvalue.

    Exactly equal eigenvalues are never split, so a spectrum of scale 0 (all zero) is one
    cluster, whatever ``rel_gap · max|λ|`` rounds to.

    Args:
        eigenvalues: 1-D tensor sorted in either ascending or descending order.
        rel_gap: Relative gap that separates clusters, ``0 < rel_gap`` (a Python or NumPy
            number, not a bool).

    Returns:
        Half-open index ranges ``(start, stop)`` covering all indices in order.

    Raises:
        TypeError: if ``eigenvalues`` is not a floating-point tensor or ``rel_gap`` not a
            real number.
        ValueError: if it is not 1-D, is empty, contains NaN/inf, is unsorted, or if
            ``rel_gap`` is not positive and finite.

    Example:
        >>> import torch
        >>> eigenvalues_ = torch.tensor([10.0, 9.99, 5.0, 1.0, 0.999])
        >>> eigenvalue_clusters(eigenvalues_, rel_gap=0.01)
        [(0, 2), (2, 3), (3, 5)]
    """
    lam = _check_eigenvalues(eigenvalues)
    rel_gap = check_real("rel_gap", rel_gap, low=0.0, low_open=True)
    threshold = rel_gap * lam.abs().max().item()
    gaps = (lam[1:] - lam[:-1]).abs().tolist()
    # gap > 0 as well: at scale 0 (or a threshold that underflows) every gap would pass.
    cuts = [0, *(i + 1 for i, gap in enumerate(gaps) if gap > 0 and gap >= threshold)]
    return list(zip(cuts, [*cuts[1:], lam.numel()], strict=True))


def _check_eigenvalues(eigenvalues: object) -> torch.Tensor:
    if not isinstance(eigenvalues, torch.Tensor) or not eigenvalues.is_floating_point():
        raise TypeError("eigenvalues must be a floating-point torch.Tensor")
    if eigenvalues.dim() != 1 or eigenvalues.numel() == 0:
        raise ValueError(f"eigenvalues must be a non-empty 1-D tensor, got {eigenvalues.shape}")
    lam = eigenvalues.detach().to("cpu", torch.float64)
    if not torch.isfinite(lam).all():
        raise ValueError("eigenvalues contain NaN or inf")
    d = lam[1:] - lam[:-1]
    if not ((d >= 0).all() or (d <= 0).all()):
        raise ValueError("eigenvalues must be sorted (ascending or descending)")
    return lam


@dataclass(frozen=True)
class ClusterAngle:
    """Largest principal angle between two bases restricted to one eigenvalue cluster.

    Attributes:
        start: First column index of the cluster.
        stop: One past its last column index.
        eigenvalues: ``(largest, smallest)`` eigenvalue of the cluster.
        gap: Distance to the nearest eigenvalue outside the cluster (``inf`` if none).
        angle: Largest principal angle between the two cluster subspaces.

    Example:
        >>> import torch
        >>> q = torch.eye(3, dtype=torch.float64)
        >>> c = cluster_angles(q, q, torch.tensor([3.0, 2.0, 1.0]), rel_gap=0.1)[0]
        >>> (c.start, c.stop, c.eigenvalues, c.gap, c.angle)
        (0, 1, (3.0, 3.0), 1.0, 0.0)
    """

    start: int
    stop: int
    eigenvalues: tuple[float, float]
    gap: float
    angle: float


def cluster_angles(
    Q_a: torch.Tensor,
    Q_b: torch.Tensor,
    eigenvalues: torch.Tensor,
    rel_gap: float,
    degrees: bool = True,
) -> list[ClusterAngle]:
    """Compare two eigenbases only where the comparison means something.

    Columns are grouped into clusters by :func:`eigenvalue_clusters`; inside a cluster the
    individual eigenvectors are arbitrary, so the comparison reports one number per cluster,
    the largest principal angle between the spans. Both bases must order their columns like
    ``eigenvalues`` (the reference spectrum, usually that of ``Q_a``).

    Args:
        Q_a: ``(n, k)`` orthonormal columns, the reference basis.
        Q_b: ``(n, k)`` orthonormal columns to compare with it.
        eigenvalues: ``(k,)`` sorted eigenvalues belonging to the columns of ``Q_a``.
        rel_gap: Relative spectral gap that separates clusters (see
            :func:`eigenvalue_clusters`).
        degrees: Degrees (default) or radians.

    Returns:
        One :class:`ClusterAngle` per cluster, in column order.

    Raises:
        TypeError: if ``degrees`` is not a bool, plus the errors of :func:`principal_angles`
            and :func:`eigenvalue_clusters`.
        ValueError: if the shapes disagree, plus the errors of :func:`principal_angles` and
            :func:`eigenvalue_clusters`.

    Example:
        >>> import torch
        >>> q = torch.eye(3, dtype=torch.float64)
        >>> r = q[:, [1, 0, 2]]  # swaps two eigenvectors of a repeated eigenvalue
        >>> [c.angle for c in cluster_angles(q, r, torch.tensor([2.0, 2.0, 1.0]), 0.1)]
        [0.0, 0.0]
    """
    degrees = check_flag("degrees", degrees)
    A = _as_float64_matrix(Q_a, "Q_a")
    B = _as_float64_matrix(Q_b, "Q_b")
    lam = _check_eigenvalues(eigenvalues)
    if A.shape != B.shape or A.shape[1] != lam.numel():
        raise ValueError(
            f"Q_a {tuple(A.shape)}, Q_b {tuple(B.shape)} and eigenvalues {tuple(lam.shape)} "
            "must agree in their number of columns"
        )
    _check_orthonormal(A, "Q_a", Q_a.dtype)
    _check_orthonormal(B, "Q_b", Q_b.dtype)
    out = []
    for start, stop in eigenvalue_clusters(lam, rel_gap):
        inside = lam[start:stop]
        outside = torch.cat([lam[:start], lam[stop:]])
        if outside.numel():
            gap = (outside[:, None] - inside[None, :]).abs().min().item()
        else:
            gap = math.inf
        angle = _to_unit(
            principal_angles_radians(A[:, start:stop], B[:, start:stop]), degrees
        ).max()
        out.append(
            ClusterAngle(
                start=start,
                stop=stop,
                eigenvalues=(inside.max().item(), inside.min().item()),
                gap=gap,
                angle=angle.item(),
            )
        )
    return out


def davis_kahan_bound(perturbation_norm: float, gap: float, degrees: bool = True) -> float:
    """Davis–Kahan sin θ bound on how far an isolated eigenspace can turn.

    For symmetric A and A + E, an eigenspace of A whose eigenvalues are separated by ``gap``
    from the rest of A's spectrum turns by a largest principal angle θ with
    sin θ ≤ ‖E‖₂ / (gap − ‖E‖₂) whenever ‖E‖₂ < gap. This is the sin θ theorem of Davis and
    Kahan (1970), stated with the unperturbed gap: by Weyl's inequality the perturbed
    eigenvalues move by at most ‖E‖₂, which shrinks the separation the theorem needs to
    ``gap − ‖E‖₂``. Beyond that no angle is excluded and the bound is 90°.

    Args:
        perturbation_norm: Spectral norm ‖E‖₂ ≥ 0 of the perturbation.
        gap: Separation ``> 0`` of the eigenspace's eigenvalues from the rest of the spectrum.
        degrees: Degrees (default) or radians.

    Returns:
        The bound on the largest principal angle.

    Raises:
        TypeError: if ``perturbation_norm`` or ``gap`` is not a real number (bools and tensors
            are not; NumPy scalars are), or ``degrees`` is not a bool.
        ValueError: if ``perturbation_norm`` is negative or not finite, or ``gap`` is not a
            positive number.

    Example:
        >>> round(davis_kahan_bound(0.1, 1.1), 4)
        5.7392
    """
    perturbation_norm = check_real("perturbation_norm", perturbation_norm, low=0.0)
    gap = check_real("gap", gap, low=0.0, low_open=True, finite=False)
    degrees = check_flag("degrees", degrees)
    if perturbation_norm >= gap:
        angle = math.pi / 2
    else:
        angle = math.asin(min(1.0, perturbation_norm / (gap - perturbation_norm)))
    return math.degrees(angle) if degrees else angle
