"""The diag(QᵀLQ) experiment of the TF32 chapter, as functions returning data.

A symmetric positive-definite L is built from a known eigenbasis Q and spectrum λ, and
λ is recovered as ``diag(QᵀLQ)`` in several precisions. The chapter, the tests and
``python -m eigprec_book.record tf32`` all call these functions.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

import torch

from eigprec._args import check_int
from eigprec.precision import matmul_precision
from eigprec.tf32 import (
    emulate_tf32,
    has_real_tf32,
    matmul_3xtf32,
    round_tf32,
    tf32_matmul_enabled,
)

__all__ = [
    "FORMATS",
    "OOTOMO_A100_TFLOPS",
    "PUBLISHED_THROUGHPUT",
    "TABLE_INDICES",
    "DiagQtLQResult",
    "build_qtlq_problem",
    "diag_qtlq",
    "diag_qtlq_experiment",
    "format_table",
    "median",
    "medium_precision_check",
    "precision_knobs",
    "predicted_error_level",
    "predicted_median_error",
    "qtlq_spectrum",
    "remedies_experiment",
    "rounding_examples",
]

#: Indices of the chapter's table (head, near-degenerate block, tail).
TABLE_INDICES = (0, 1, 4, 20, 50, 80, 100, 115, 120, 124, 125, 126, 127)

#: Methods :func:`diag_qtlq` knows.
METHODS = ("fp32", "tf32", "3xtf32", "fp64")


def qtlq_spectrum(
    n: int = 128,
    top: float = 2.5e6,
    head: tuple[float, ...] = (1.0, 0.98, 0.96, 0.94, 0.92),
    tail_start: float = 0.9,
    smallest: float = 0.1,
) -> torch.Tensor:
    """The experiment's eigenvalues: a near-degenerate head, then a log-spaced tail.

    Args:
        n: matrix size (more than ``len(head)``).
        top: the largest eigenvalue.
        head: the head as fractions of ``top``, descending.
        tail_start: the tail's first value as a fraction of ``top``.
        smallest: the tail's last (smallest) value, positive.

    Returns:
        float64 tensor of ``n`` descending eigenvalues.

    Raises:
        TypeError: if ``n`` is not an int.
        ValueError: if ``n`` is too small or a value is not positive.

    Example:
        >>> lam = qtlq_spectrum()
        >>> (len(lam), lam[0].item(), round(lam[-1].item(), 12))
        (128, 2500000.0, 0.1)
    """
    n = check_int("n", n)
    if n <= len(head):
        raise ValueError(f"n must exceed the head length {len(head)}, got {n}")
    if top <= 0 or smallest <= 0 or tail_start <= 0 or min(head) <= 0:
        raise ValueError("top, head, tail_start and smallest must be positive")
    head_values = top * torch.tensor(head, dtype=torch.float64)
    tail = torch.logspace(
        math.log10(tail_start * top), math.log10(smallest), n - len(head), dtype=torch.float64
    )
    return torch.cat([head_values, tail])


def build_qtlq_problem(
    n: int = 128, seed: int = 0, device: str | torch.device = "cpu", **spectrum: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Build ``L = Q diag(λ) Qᵀ`` in float64 and return it with Q in float32.

    Q is the QR factor of ``torch.randn(n, n, generator=torch.Generator().manual_seed(seed),
    dtype=torch.float64)``; L is symmetrised before the cast.

    Args:
        n: matrix size.
        seed: seed of the generator that draws Q.
        device: where the float32 tensors are placed.
        **spectrum: passed to :func:`qtlq_spectrum`.

    Returns:
        ``(L, Q, lam)``: float32 L and Q on ``device``, float64 λ on the CPU.

    Example:
        >>> L, Q, lam = build_qtlq_problem(n=16, smallest=1.0)
        >>> (L.dtype, Q.shape, lam.dtype)
        (torch.float32, torch.Size([16, 16]), torch.float64)
    """
    seed = check_int("seed", seed)
    lam = qtlq_spectrum(n=n, **spectrum)
    gen = torch.Generator().manual_seed(seed)
    q, _ = torch.linalg.qr(torch.randn(n, n, generator=gen, dtype=torch.float64))
    big_l = (q * lam) @ q.T
    big_l = (big_l + big_l.T) / 2
    return big_l.float().to(device), q.float().to(device), lam


def diag_qtlq(
    big_l: torch.Tensor, q: torch.Tensor, method: str = "fp32", rounding: str | None = None
) -> torch.Tensor:
    """``diag(QᵀLQ)`` computed as ``((Qᵀ @ L) * Qᵀ).sum(-1)`` with one matmul precision.

    Args:
        big_l: float32 symmetric matrix L.
        q: float32 matrix Q of the same shape.
        method: ``"fp32"`` (precision 'highest'), ``"tf32"`` (precision 'high': real
            TF32 on a GPU that has it, emulated with ``rounding`` elsewhere),
            ``"3xtf32"`` (:func:`~eigprec.tf32.matmul_3xtf32` at 'high') or ``"fp64"``
            (float64 arithmetic on the float32 data).
        rounding: the emulator's rounding where TF32 is emulated.

    Returns:
        float64 tensor of the ``n`` diagonal entries, on the CPU.

    Raises:
        ValueError: for an unknown method or mismatched shapes.
        TypeError: if L or Q is not float32.

    Example:
        >>> L, Q, lam = build_qtlq_problem(n=16, smallest=1.0)
        >>> bool((diag_qtlq(L, Q, "fp64") - lam).abs().max() < 1)
        True
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if big_l.dtype != torch.float32 or q.dtype != torch.float32:
        raise TypeError(f"L and Q must be float32, got {big_l.dtype} and {q.dtype}")
    if big_l.dim() != 2 or big_l.shape != q.shape or big_l.shape[0] != big_l.shape[1]:
        raise ValueError(
            f"L and Q must be square and of one shape, got {tuple(big_l.shape)}, {tuple(q.shape)}"
        )
    # [show:methods]
    if method == "fp64":
        qt = q.double().T
        return ((qt @ big_l.double()) * qt).sum(-1).cpu()
    if method == "fp32":
        with matmul_precision("highest"):
            product = q.T @ big_l
    else:
        with matmul_precision("high"), emulate_tf32(rounding):
            product = q.T @ big_l if method == "tf32" else matmul_3xtf32(q.T, big_l)
    return (product * q.T).sum(-1).double().cpu()
    # [/show:methods]


@dataclass(frozen=True)
class DiagQtLQResult:
    """What :func:`diag_qtlq_experiment` returns.

    Attributes:
        eigenvalues: the true λ (float64, descending).
        estimates: method name -> float64 ``diag(QᵀLQ)``.
        tf32_real: True when the TF32 column ran on real TF32 hardware.
        rounding: the emulator's rounding where TF32 was emulated.
        device: where the matmuls ran.
    """

    eigenvalues: torch.Tensor
    estimates: dict[str, torch.Tensor]
    tf32_real: bool
    rounding: str
    device: str

    def errors(self, method: str) -> torch.Tensor:
        """Absolute errors ``|estimate - λ|`` of one method (float64)."""
        return (self.estimates[method] - self.eigenvalues).abs()

    def table(self, indices: tuple[int, ...] = TABLE_INDICES) -> list[dict[str, float]]:
        """Rows ``{"index", "true", <method>...}`` at ``indices`` for a printed table."""
        rows = []
        for i in indices:
            row = {"index": float(i), "true": self.eigenvalues[i].item()}
            row.update({m: v[i].item() for m, v in self.estimates.items()})
            rows.append(row)
        return rows


def diag_qtlq_experiment(
    n: int = 128,
    seed: int = 0,
    rounding: str | None = None,
    device: str | torch.device = "cpu",
    methods: tuple[str, ...] = METHODS,
) -> DiagQtLQResult:
    """Recover the spectrum of the chapter's L through ``diag(QᵀLQ)`` in each precision.

    Args:
        n: matrix size (the chapter uses 128).
        seed: seed of the generator that draws Q.
        rounding: the emulator's rounding where TF32 is emulated.
        device: where the matmuls run.
        methods: which of ``"fp32"``, ``"tf32"``, ``"3xtf32"``, ``"fp64"`` to compute.

    Returns:
        A :class:`DiagQtLQResult`.

    Example:
        >>> res = diag_qtlq_experiment(n=32, methods=("fp32", "tf32"))
        >>> bool(res.errors("tf32").max() > res.errors("fp32").max())
        True
    """
    big_l, q, lam = build_qtlq_problem(n=n, seed=seed, device=device)
    estimates = {m: diag_qtlq(big_l, q, m, rounding) for m in methods}
    return DiagQtLQResult(
        eigenvalues=lam,
        estimates=estimates,
        tf32_real=has_real_tf32(big_l.device),
        rounding=rounding,
        device=str(big_l.device),
    )


def remedies_experiment(
    n: int = 128, seed: int = 0, rounding: str | None = None, device: str | torch.device = "cpu"
) -> dict[str, torch.Tensor]:
    """Absolute errors of ``diag(QᵀLQ)`` under each remedy for TF32's loss.

    Remedies: ``"tf32"`` (none, for reference), ``"fp32"`` (precision 'highest'),
    ``"fp64"`` (float64 arithmetic on the float32 data), ``"3xtf32"``,
    ``"tf32 rescaled"`` (L scaled by ``2**-21`` before the TF32 product and back after:
    a power-of-two scale commutes with rounding, so nothing changes) and
    ``"tf32 deflated"`` (the five head eigenpairs, known here, are subtracted from L
    in float64 and their contribution added back in float64: the TF32 error then
    follows the largest *remaining* eigenvalue).

    Args:
        n: matrix size.
        seed: seed of the generator that draws Q.
        rounding: the emulator's rounding where TF32 is emulated.
        device: where the matmuls run.

    Returns:
        Remedy name -> float64 absolute errors against the true λ.

    Example:
        >>> errs = remedies_experiment(n=32)
        >>> bool(errs["3xtf32"].max() < errs["tf32"].max())
        True
    """
    big_l, q, lam = build_qtlq_problem(n=n, seed=seed, device=device)
    errors = {m: (diag_qtlq(big_l, q, m, rounding) - lam).abs() for m in METHODS}
    scale = 2.0**-21
    rescaled = diag_qtlq(big_l * scale, q, "tf32", rounding) / scale
    errors["tf32 rescaled"] = (rescaled - lam).abs()
    k = 5
    q64 = q.double().cpu()
    head = (q64[:, :k] * lam[:k]) @ q64[:, :k].T
    rest = (big_l.double().cpu() - head).float().to(big_l.device)
    head_diag = ((q64.T @ head) * q64.T).sum(-1)
    deflated = diag_qtlq(rest, q, "tf32", rounding) + head_diag
    errors["tf32 deflated"] = (deflated - lam).abs()
    return errors


# --- published figures (not measured here) ----------------------------------------------

#: Peak throughput in TFLOP/s from NVIDIA's datasheets: float32 on the CUDA cores, TF32 on the
#: tensor cores dense and with 2:4 structured sparsity. The A100 datasheet gives TF32 as
#: "156 TF | 312 TF*" (* with sparsity); the H100 datasheet gives "989 teraFLOPS*" (* with
#: sparsity, "specifications are one-half lower without sparsity"), so dense is 989/2. The
#: A40 (GA102, the workstation tier) datasheet gives FP32 37.4 and TF32 "74.8 | 149.6*".
#: ``source`` is the key of the chapter's bibliography entry.
PUBLISHED_THROUGHPUT = (
    {
        "gpu": "A100 SXM",
        "fp32": 19.5,
        "tf32_dense": 156.0,
        "tf32_sparse": 312.0,
        "source": "nvidia_a100_datasheet",
    },
    {
        "gpu": "H100 SXM",
        "fp32": 67.0,
        "tf32_dense": 494.5,
        "tf32_sparse": 989.0,
        "source": "nvidia_h100_datasheet",
    },
    {
        "gpu": "A40 (GA102)",
        "fp32": 37.4,
        "tf32_dense": 74.8,
        "tf32_sparse": 149.6,
        "source": "nvidia_a40_datasheet",
    },
)

#: Ootomo and Yokota (2022): their error-corrected TF32 GEMM (full float32 exponent range)
#: on an A100, in TFLOP/s.
OOTOMO_A100_TFLOPS = 33.0


# --- the chapter's smaller tables -----------------------------------------------------

#: (name, exponent bits, explicit mantissa bits, torch dtype or None) of the formats shown.
FORMATS = (
    ("fp32", 8, 23, torch.float32),
    ("TF32", 8, 10, None),
    ("bf16", 8, 7, torch.bfloat16),
    ("fp16", 5, 10, torch.float16),
)


def format_table() -> list[dict[str, float | int | str]]:
    """Unit roundoff, spacing at 1, range of fp32, TF32, bf16 and fp16.

    The values of fp32, bf16 and fp16 come from ``torch.finfo`` of the installed torch;
    TF32's (it has no torch dtype) from :func:`~eigprec.tf32.round_tf32`, and each is
    checked against the formula ``2**-mantissa_bits`` for the spacing at 1.

    Returns:
        One dict per format: ``format``, ``exponent_bits``, ``mantissa_bits``,
        ``unit_roundoff`` (half the spacing at 1), ``spacing_at_1``, ``max``,
        ``min_normal``.

    Raises:
        RuntimeError: if torch's numbers disagree with the formula (never expected).

    Example:
        >>> [row["spacing_at_1"] for row in format_table()][:2]
        [1.1920928955078125e-07, 0.0009765625]
    """
    rows: list[dict[str, float | int | str]] = []
    for name, exp_bits, man_bits, dtype in FORMATS:
        if dtype is not None:
            info = torch.finfo(dtype)
            eps, big, tiny = float(info.eps), float(info.max), float(info.tiny)
        else:
            one = torch.tensor([1.0, 1.0 + 2.0**-man_bits])
            eps = float(torch.diff(round_tf32(one, "rz")).item())
            big = round_tf32(torch.tensor([torch.finfo(torch.float32).max]), "rz").item()
            tiny = float(torch.finfo(torch.float32).tiny)
        if eps != 2.0**-man_bits:
            raise RuntimeError(f"{name}: spacing at 1 is {eps}, expected 2**-{man_bits}")
        rows.append(
            {
                "format": name,
                "exponent_bits": exp_bits,
                "mantissa_bits": man_bits,
                "unit_roundoff": eps / 2,
                "spacing_at_1": eps,
                "max": big,
                "min_normal": tiny,
            }
        )
    return rows


def rounding_examples() -> list[dict[str, float | str]]:
    """Hand-picked float32 values and their TF32 images under each rounding.

    Ties (exactly half-way between two TF32 neighbours), values next to ties, a tie
    that carries into the next binade, overflow, a subnormal, a negative zero and NaN.

    Returns:
        One dict per value: ``what``, ``x`` and one entry per rounding (``rna``,
        ``rne``, ``rz``), as Python floats.

    Example:
        >>> row = rounding_examples()[0]
        >>> (row["rna"], row["rne"], row["rz"])
        (1.0009765625, 1.0, 1.0)
    """
    cases = [
        ("tie, even below", 1 + 2**-11),
        ("tie, odd below", 1 + 3 * 2**-11),
        ("negative tie", -(1 + 2**-11)),
        ("just above a tie", 1 + 2**-11 + 2**-20),
        ("just below a tie", 1 + 2**-11 - 2**-23),
        ("tie of issue 53635", 1024.5),
        ("tie carrying to 2", 2 - 2**-12),
        ("largest float32", float(torch.finfo(torch.float32).max)),
        ("subnormal tie", 2**-130 + 2**-137),
        ("negative zero", -0.0),
        ("NaN", float("nan")),
    ]
    x = torch.tensor([v for _, v in cases], dtype=torch.float32)
    rounded = {r: round_tf32(x, r).tolist() for r in ("rna", "rne", "rz")}
    return [
        {"what": what, "x": x[i].item(), **{r: rounded[r][i] for r in rounded}}
        for i, (what, _) in enumerate(cases)
    ]


def precision_knobs() -> dict[str, object]:
    """What each float32 precision knob sets in the installed torch, read back live.

    Every setting is restored afterwards (via :func:`~eigprec.precision.matmul_precision`).

    Returns:
        ``"modes"``: for 'highest', 'high' and 'medium', the values of
        ``cuda.matmul.fp32_precision``, ``cuda.matmul.allow_tf32``,
        ``mkldnn.matmul.fp32_precision`` and whether cuBLAS would use TF32;
        ``"cudnn_allow_tf32"`` and ``"cudnn_conv_fp32_precision"`` at the defaults;
        ``"legacy_getter_raises_after_mix"``: whether
        ``torch.get_float32_matmul_precision()`` raises once the new cuBLAS attribute
        was set alone; ``"has_new_api"``.

    Example:
        >>> precision_knobs()["modes"]["high"]["cublas_uses_tf32"]
        True
    """
    matmul = torch.backends.cuda.matmul
    has_new = hasattr(matmul, "fp32_precision")
    modes: dict[str, dict[str, object]] = {}
    for mode in ("highest", "high", "medium"):
        with matmul_precision(mode):
            modes[mode] = {
                "cuda_matmul_fp32_precision": getattr(matmul, "fp32_precision", None),
                "allow_tf32": bool(matmul.allow_tf32),
                "mkldnn_matmul_fp32_precision": getattr(
                    getattr(torch.backends.mkldnn, "matmul", None), "fp32_precision", None
                ),
                "cublas_uses_tf32": tf32_matmul_enabled(),
            }
    raises = False
    if has_new:
        with matmul_precision("highest"):
            matmul.fp32_precision = "tf32"
            try:
                torch.get_float32_matmul_precision()
            except RuntimeError:
                raises = True
    cudnn_conv = getattr(getattr(torch.backends.cudnn, "conv", None), "fp32_precision", None)
    return {
        "modes": modes,
        "cudnn_allow_tf32": bool(torch.backends.cudnn.allow_tf32),
        "cudnn_conv_fp32_precision": cudnn_conv,
        "legacy_getter_raises_after_mix": raises,
        "has_new_api": has_new,
    }


def predicted_error_level(eigenvalues: torch.Tensor, unit_roundoff: float) -> float:
    """Typical absolute error of ``diag(QᵀLQ)`` when L's entries carry relative errors u.

    Rounding each entry of L perturbs it by up to ``u·|L_jk|`` with random sign; for a
    random orthogonal Q (entries of size ``n**-0.5``) the perturbation of
    ``q_iᵀ L q_i`` then has a size of about ``u·‖L‖_F / n`` -- the same for every i,
    because it is set by ``‖L‖_F``, i.e. by the largest eigenvalues, not by λ_i.

    Args:
        eigenvalues: the spectrum of L (``‖L‖_F`` is its 2-norm).
        unit_roundoff: the format's unit roundoff u.

    Returns:
        ``u · ‖λ‖₂ / n``.

    Example:
        >>> predicted_error_level(torch.ones(4, dtype=torch.float64), 0.5)
        0.25
    """
    lam = eigenvalues.double()
    return float(unit_roundoff * torch.linalg.vector_norm(lam) / lam.numel())


def median(values: torch.Tensor) -> float:
    """The sample median: for an even count, the mean of the two middle values.

    ``torch.median`` returns the lower of the two (issue 52: over the chapter's 128
    eigenvalues that read 10.836 where the median is 11.198).

    Args:
        values: a tensor of any shape (flattened); NaN propagates.

    Returns:
        The median as a Python float.

    Example:
        >>> x = torch.tensor([4.0, 1.0, 3.0, 2.0])
        >>> median(x), float(x.median())
        (2.5, 2.0)
    """
    return float(values.double().flatten().quantile(0.5))


def predicted_median_error(eigenvalues: torch.Tensor, unit_roundoff: float) -> float:
    """Median absolute error of ``diag(QᵀLQ)`` predicted from rounding L's entries alone.

    A crude model: each entry's relative rounding error is independent and uniform on
    ``[-u, u]`` (standard deviation ``u/√3``) and every ``q_ij²`` is ``1/n``. The
    perturbation ``q_iᵀ δL q_i`` is then close to normal with standard deviation
    ``u·‖L‖_F / (√3·n)``, and the median of its absolute value is the normal's
    third quartile, 0.674 times that. It leaves out the rounding of the sums, so it
    describes TF32 (where operand rounding dominates) but not float32 arithmetic.

    Args:
        eigenvalues: the spectrum of L (``‖L‖_F`` is its 2-norm).
        unit_roundoff: the format's unit roundoff u.

    Returns:
        ``0.674 · u · ‖λ‖₂ / (√3 · n)``.

    Example:
        >>> round(predicted_median_error(torch.ones(3, dtype=torch.float64), 1.0), 4)
        0.2248
    """
    quartile = statistics.NormalDist().inv_cdf(0.75)
    return quartile / math.sqrt(3) * predicted_error_level(eigenvalues, unit_roundoff)


def medium_precision_check(n: int = 256, seed: int = 0) -> dict[str, float | int]:
    """How a float32 product on the CPU changes between precision 'highest' and 'medium'.

    At 'medium' torch lets oneDNN use bf16 internally where the CPU supports it; this
    measures what the current machine actually does.

    Args:
        n: size of the square random operands.
        seed: generator seed.

    Returns:
        ``entries``, ``changed`` (entries that differ), ``max_rel_change`` (largest
        change over the largest |entry|) and, for scale, ``bf16_operand_error``: the
        same measure for the 'highest' product of operands rounded to bf16.

    Example:
        >>> check = medium_precision_check(n=16)
        >>> check["entries"]
        256
    """
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn(n, n, generator=gen)
    b = torch.randn(n, n, generator=gen)
    with matmul_precision("highest"):
        ref = a @ b
        bf16 = a.bfloat16().float() @ b.bfloat16().float()
    with matmul_precision("medium"):
        medium = a @ b
    scale = ref.abs().max()
    return {
        "entries": ref.numel(),
        "changed": int((medium != ref).sum()),
        "max_rel_change": float((medium - ref).abs().max() / scale),
        "bf16_operand_error": float((bf16 - ref).abs().max() / scale),
    }
