"""The error measures of one audited product (private helper of :mod:`eigprec.audit.mode`).

Norm-wise, worst-entry and row·column-scaled errors of a TF32 result against a reference,
in few passes over the data: they run for every audited product.
"""

from __future__ import annotations

import math

import torch

__all__ = ["ENTRY_FLOOR"]

# Entries of the reference smaller than this fraction of its largest magnitude are measured
# against the fraction instead: float32 (unit roundoff 2**-24) cannot resolve them at the
# result's scale, so their own relative error means nothing.
ENTRY_FLOOR = 2.0**-24


def _errors(
    tf32: torch.Tensor,
    ref: torch.Tensor,
    fp32: torch.Tensor | None,
    fp32_out: torch.Tensor,
    scale: tuple[torch.Tensor, torch.Tensor] | None = None,
    scaled: list | None = None,
    owned: bool = False,
) -> tuple[float, float, float | None, bool]:
    # Norm-wise and worst-entry error of `tf32` against `ref`, plus float32's norm-wise
    # error when `ref` is float64, and whether TF32 gave inf/NaN where float32 (`fp32_out`)
    # did not. Few passes over the data and few calls: this runs for every measured product.
    # `owned`: `tf32` is the audit's own result, which may be overwritten.
    if owned and fp32 is None and tf32.dtype == ref.dtype and tf32.shape == ref.shape:
        found = _common_errors(tf32, ref, scale)
        if found is not None:
            if scaled is not None:
                scaled[0] = found[2]
            return found[0], found[1], None, math.isinf(found[0])
    diff = torch.sub(tf32, ref)  # mixed float32/float64 promotes in the loop, no copy
    size, dist = _norm(ref), _norm(diff)
    left_out = False  # whether non-finite entries were left out (see the row·col quotient)
    if not (math.isfinite(size) and math.isfinite(dist)):
        left_out = True
        # TF32 overflowed (its operands round up to 2**128) where float32 did not: that
        # is an infinite error, not one to leave out.
        if bool((~torch.isfinite(tf32) & torch.isfinite(fp32_out)).any()):
            return math.inf, math.inf, _fp32_error(fp32, ref), True
        # Leave out the non-finite entries (of either result) and measure the rest.
        finite = torch.isfinite(ref) & torch.isfinite(tf32)
        ref = torch.where(finite, ref, 0.0)
        diff = torch.where(finite, diff, 0.0)
        if fp32 is not None:
            fp32 = torch.where(finite, fp32, ref)
        size, dist = _norm(ref), _norm(diff)
    norm_error = _ratio(dist, size)
    entry_error = 0.0
    if ref.numel():
        magnitude = ref.abs()
        floor = max(ENTRY_FLOOR * float(magnitude.max()), torch.finfo(ref.dtype).tiny)
        diff.abs_()
        # Both quotients land in buffers already held (magnitude's, then diff's): no
        # allocation of another m×n tensor, which on a large product costs as much as a pass.
        magnitude.clamp_min_(floor)
        entry_error = float(torch.div(diff, magnitude, out=magnitude).max())
        if scale is not None:  # (see _row_column_scale)
            if scale[0].dtype != diff.dtype:  # norms beyond float32's range: quotients in float64
                diff = diff.double()
            quotient = diff.div_(scale[0]).div_(scale[1])
            if left_out:  # a row or column with inf/NaN has a NaN scale: left out as well
                quotient.nan_to_num_(nan=0.0)
            scaled[0] = float(quotient.max())
    fp32_error = None
    if fp32 is not None:
        fp32_error = _ratio(_norm(torch.sub(fp32, ref)), size)
    return norm_error, entry_error, fp32_error, False


def _common_errors(
    tf32: torch.Tensor, ref: torch.Tensor, scale: tuple[torch.Tensor, torch.Tensor] | None
) -> tuple[float, float, float | None] | None:
    # _errors for the common case, in half the calls and one allocation: the TF32 result
    # (ours) becomes the difference in place, and read-outs are batched. None, with `tf32`
    # untouched, unless `ref` is finite and its norm well inside float32's range (and any
    # scale float32): _errors' general path measures those as before.
    if not ref.numel() or (scale is not None and scale[0].dtype != ref.dtype):
        return None
    low, top = torch.aminmax(ref)
    size, low, top = torch.stack([torch.linalg.vector_norm(ref), low, top]).tolist()
    if not (1e-15 < size < 1e15 and math.isfinite(low) and math.isfinite(top)):
        return None
    diff = tf32.sub_(ref)
    dist = float(torch.linalg.vector_norm(diff))
    if not math.isfinite(dist):  # TF32 overflowed where the (finite) reference did not
        return math.inf, math.inf, None
    if dist != 0.0 and not 1e-15 < dist < 1e15:
        dist = float(torch.linalg.vector_norm(diff, dtype=torch.float64))
    floor = max(ENTRY_FLOOR * max(-low, top), torch.finfo(ref.dtype).tiny)
    diff.abs_()
    quotient = torch.abs(ref).clamp_min_(floor)
    entry = torch.div(diff, quotient, out=quotient).max()
    if scale is None:
        return dist / size, float(entry), None
    scaled = diff.div_(scale[0]).div_(scale[1]).max()
    entry, scaled = torch.stack([entry, scaled]).tolist()
    return dist / size, entry, scaled


def _row_column_scale(
    a: torch.Tensor, b: torch.Tensor
) -> tuple[tuple[torch.Tensor, torch.Tensor], bool]:
    # (‖A_i,:‖₂, ‖B_:,j‖₂), whose product is the largest value entry (i, j) of AB could take
    # (Cauchy-Schwarz): an entry's error against it does not alarm on entries near zero by
    # cancellation. Kept as two vectors (the m×n outer product would cost a pass and a copy).
    # Also returns whether neither operand holds a NaN (a NaN entry makes its row's or
    # column's norm NaN, and nothing else does): the caller's TF32 rounding then needs no
    # NaN screen of its own, which would be a pass over each operand.
    rows, cols = _axis_norm(a, -1), _axis_norm(b, -2)
    row_lo, row_hi, col_lo, col_hi = _extremes(rows, cols)
    nan_free = row_hi == row_hi and col_hi == col_hi
    if not (_in_range(row_lo, row_hi) and _in_range(col_lo, col_hi)):
        # A square beyond float32's range (entries past ~1e19, or below ~1e-19 with no
        # larger one): in float32 the scale reads inf (the column 0.0) or 0. Float64 holds it.
        rows, cols = _axis_norm(a.double(), -1), _axis_norm(b.double(), -2)
        row_lo = col_lo = 0.0
    tiny = torch.finfo(rows.dtype).tiny
    # (a zero norm is raised to the tiny floor; without one, nothing to clamp)
    return (
        rows.clamp_min_(tiny) if not row_lo > 0 else rows,
        cols.clamp_min_(tiny) if not col_lo > 0 else cols,
    ), nan_free


def _extremes(rows: torch.Tensor, cols: torch.Tensor) -> tuple[float, float, float, float]:
    # (smallest, largest) of each set of norms, read out at once; NaN if any is NaN.
    if not (rows.numel() and cols.numel()):
        return 0.0, 0.0, 0.0, 0.0
    return tuple(torch.stack([*torch.aminmax(rows), *torch.aminmax(cols)]).tolist())


def _in_range(low: float, top: float) -> bool:
    # Whether float32 norms (smallest, largest) are finite and, where nonzero, not flushed
    # by underflow.
    if top != top:  # NaN: a row or column with NaN, left out with its entries
        return True
    return math.isfinite(top) and top < 1e18 and (low == 0.0 or low > 1e-18)


def _axis_norm(x: torch.Tensor, dim: int) -> torch.Tensor:
    # torch's norm kernel is ~10x slower along a strided axis (the columns of a row-major
    # matrix), a third of the audit's cost on a large GEMM; a sum of squares is not.
    # keepdim: the norms broadcast against the product as they are (no unsqueeze op).
    if x.stride(dim) == 1:
        return torch.linalg.vector_norm(x, dim=dim, keepdim=True)
    return x.square().sum(dim, keepdim=True).sqrt_()


def _fp32_error(fp32: torch.Tensor | None, ref: torch.Tensor) -> float | None:
    if fp32 is None:
        return None
    finite = torch.isfinite(ref) & torch.isfinite(fp32)
    ref = torch.where(finite, ref, 0.0)
    return _ratio(_norm(torch.where(finite, fp32, 0.0) - ref), _norm(ref))


def _norm(x: torch.Tensor) -> float:
    # torch's Frobenius norm squares without scaling, so float32 data beyond ~1e±18 would
    # overflow or underflow; such (rare) tensors take the slower float64 reduction.
    value = float(torch.linalg.vector_norm(x))
    if x.dtype == torch.float64 or 1e-15 < value < 1e15 or (value == 0.0 and not x.any()):
        return value
    return float(torch.linalg.vector_norm(x, dtype=torch.float64))


def _ratio(num: float, den: float) -> float:
    if den == 0.0:
        return 0.0 if num == 0.0 else math.inf
    return num / den


def _worse(a: float, b: float) -> float:
    return b if b != b or b > a else a  # NaN counts as worst
