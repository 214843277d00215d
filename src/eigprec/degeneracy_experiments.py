"""Experiments of the chapter "Eigenbasis degeneracy", as functions returning data.

Two experiments:

* :func:`eigvec_rotation_experiment` — how far an eigenvector and an eigenspace turn under
  a symmetric perturbation E, against ‖E‖/gap, beside the Davis–Kahan bound.
* :func:`spike_experiment` — one SOAP/REKLS run on i.i.d. Gaussian gradients with one
  gradient multiplied by 1000, recording the left eigenbasis Q_L after every step and the
  spectral diagnostics that explain what the spike does at each precision.

:func:`spike_angle_table` turns recorded runs into the chapter's tables. Plots live in
:mod:`eigprec.degeneracy_plots`. :func:`printed_bound` rounds a measured bound for the
prose in the direction that keeps the printed sentence true.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from eigprec.precision import current_matmul_precision, matmul_precision
from eigprec.soap import SOAP
from eigprec.subspace import cluster_angles, davis_kahan_bound, subspace_angle, top1_angle
from eigprec.tf32 import emulate_tf32, has_real_tf32

__all__ = [
    "RotationResult",
    "SpikeRun",
    "eigvec_rotation_experiment",
    "ema_first_weight",
    "library_soap_defaults",
    "printed_bound",
    "repeated_eigenvalue_demo",
    "spike_angle_table",
    "spike_experiment",
    "tf32_mode",
]


# -- 1. rotation against ‖E‖/gap ----------------------------------------------------------


@dataclass(frozen=True)
class RotationResult:
    """Eigenvector and eigenspace rotations under random perturbations.

    Attributes:
        ratios: ``(r,)`` values of ‖E‖₂/gap, where gap = λ₁ − λ₂ is the small gap.
        top1: ``(r, trials)`` angle (degrees) of the top eigenvector.
        cluster: ``(r, trials)`` largest principal angle (degrees) of the top-2 eigenspace.
        top1_bound: ``(r,)`` Davis–Kahan bound for the top eigenvector (gap λ₁ − λ₂).
        cluster_bound: ``(r,)`` Davis–Kahan bound for the top-2 eigenspace (gap λ₂ − λ₃).
        gap: The small gap λ₁ − λ₂.
        cluster_gap: The gap λ₂ − λ₃ that isolates the top-2 eigenspace.

    Example:
        >>> r = eigvec_rotation_experiment(n=6, ratios=[0.1, 1.0], trials=3)
        >>> (r.top1.shape, r.gap, r.cluster_gap)
        (torch.Size([2, 3]), 0.001, 0.5)
    """

    ratios: torch.Tensor
    top1: torch.Tensor
    cluster: torch.Tensor
    top1_bound: torch.Tensor
    cluster_bound: torch.Tensor
    gap: float
    cluster_gap: float


def eigvec_rotation_experiment(
    n: int = 32,
    gap: float = 1e-3,
    cluster_gap: float = 0.5,
    ratios: Sequence[float] | None = None,
    trials: int = 8,
    seed: int = 0,
) -> RotationResult:
    """Rotate the eigenvectors of a matrix with a small and a large gap by random E.

    A = V diag(1, 1 − gap, 1 − gap − cluster_gap, … down to 0) Vᵀ in float64, V a random
    orthogonal matrix. E is a random symmetric matrix scaled to ‖E‖₂ = ratio · gap. The top
    eigenvector is only as stable as the small gap allows; the top-2 eigenspace is isolated
    by ``cluster_gap`` and barely moves for the same E.

    Args:
        n: Matrix size, ≥ 3.
        gap: λ₁ − λ₂ > 0.
        cluster_gap: λ₂ − λ₃ > 0, with ``gap + cluster_gap < 1``.
        ratios: Values of ‖E‖₂/gap; default 25 points log-spaced in [1e-3, 1e2].
        trials: Random perturbations per ratio, ≥ 1.
        seed: Seed of the ``torch.Generator`` for V and E.

    Returns:
        A :class:`RotationResult`.

    Raises:
        ValueError: on a size or gap out of range, or non-positive ratios.

    Example:
        >>> r = eigvec_rotation_experiment(n=8, ratios=[0.01, 10.0], trials=2)
        >>> bool((r.top1 <= r.top1_bound[:, None] + 1e-9).all())
        True
    """
    if n < 3:
        raise ValueError(f"n must be ≥ 3, got {n}")
    if not (gap > 0 and cluster_gap > 0 and gap + cluster_gap < 1):
        raise ValueError(
            f"need gap > 0, cluster_gap > 0 and gap + cluster_gap < 1; got {gap}, {cluster_gap}"
        )
    if trials < 1:
        raise ValueError(f"trials must be ≥ 1, got {trials}")
    r = (
        torch.logspace(-3, 2, 25, dtype=torch.float64)
        if ratios is None
        else torch.tensor(ratios, dtype=torch.float64)
    )
    if (
        r.dim() != 1
        or r.numel() == 0
        or not bool((r > 0).all())
        or not bool(torch.isfinite(r).all())
    ):
        raise ValueError("ratios must be a non-empty sequence of positive finite numbers")
    gen = torch.Generator().manual_seed(seed)
    V = torch.linalg.qr(torch.randn(n, n, generator=gen, dtype=torch.float64)).Q
    tail = torch.linspace(1 - gap - cluster_gap, 0.0, n - 2, dtype=torch.float64)
    lam = torch.cat([torch.tensor([1.0, 1.0 - gap], dtype=torch.float64), tail])
    A = (V * lam) @ V.T
    top1 = torch.empty(r.numel(), trials, dtype=torch.float64)
    cluster = torch.empty_like(top1)
    for i, ratio in enumerate(r.tolist()):
        for j in range(trials):
            E = torch.randn(n, n, generator=gen, dtype=torch.float64)
            E = E + E.T
            E *= ratio * gap / torch.linalg.matrix_norm(E, ord=2)
            W = torch.linalg.eigh(A + E).eigenvectors.flip(-1)
            top1[i, j] = top1_angle(V[:, 0], W[:, 0])
            cluster[i, j] = subspace_angle(V, W, k=2)
    bound1 = torch.tensor([davis_kahan_bound(x * gap, gap) for x in r.tolist()])
    bound2 = torch.tensor([davis_kahan_bound(x * gap, cluster_gap) for x in r.tolist()])
    return RotationResult(r, top1, cluster, bound1, bound2, gap, cluster_gap)


def repeated_eigenvalue_demo(
    n: int = 6, perturbation: float = 1e-10, rel_gap: float = 1e-3, seed: int = 0
) -> dict[str, Any]:
    """Two eigenbases of (almost) the same matrix with a repeated top eigenvalue.

    A = V diag(2, 2, 1, …, 1/(n−2)) Vᵀ in float64 and A + E with a random symmetric E of
    spectral norm ``perturbation``. ``eigh`` returns some basis of the repeated eigenspace;
    the tiny E decides which, so the top eigenvectors differ by an arbitrary angle while the
    eigenspace itself (and every well-separated eigenvector) agrees to rounding.

    Args:
        n: Matrix size, ≥ 3.
        perturbation: ‖E‖₂, > 0.
        rel_gap: Relative gap for :func:`eigprec.cluster_angles`.
        seed: Seed of the ``torch.Generator``.

    Returns:
        ``{"eigenvalues", "top1_angle", "clusters"}``: A's eigenvalues (descending), the
        angle between the two top eigenvectors (degrees) and the per-cluster comparison.

    Example:
        >>> d = repeated_eigenvalue_demo()
        >>> max(c.angle for c in d["clusters"]) < 1e-3
        True
    """
    if n < 3 or not perturbation > 0:
        raise ValueError(f"need n ≥ 3 and perturbation > 0, got {n}, {perturbation}")
    gen = torch.Generator().manual_seed(seed)
    V = torch.linalg.qr(torch.randn(n, n, generator=gen, dtype=torch.float64)).Q
    lam = torch.tensor([2.0, 2.0] + [1.0 / k for k in range(1, n - 1)], dtype=torch.float64)
    A = (V * lam) @ V.T
    E = torch.randn(n, n, generator=gen, dtype=torch.float64)
    E = E + E.T
    E *= perturbation / torch.linalg.matrix_norm(E, ord=2)
    W1 = torch.linalg.eigh(A).eigenvectors.flip(-1)
    W2 = torch.linalg.eigh(A + E).eigenvectors.flip(-1)
    return {
        "eigenvalues": lam,
        "top1_angle": top1_angle(W1[:, 0], W2[:, 0]),
        "clusters": cluster_angles(W1, W2, lam, rel_gap=rel_gap),
    }


# -- 2. the spike experiment --------------------------------------------------------------


def tf32_mode(device: torch.device | str, fp32_matmul_prec: str, dtype: torch.dtype) -> str:
    """How TF32 enters a run: ``"none"``, ``"hardware"`` or ``"emulated"``.

    Args:
        device: Device the run uses.
        fp32_matmul_prec: ``'highest'``, ``'high'`` or ``'medium'``.
        dtype: Optimizer dtype; float64 products never use TF32.

    Returns:
        ``"none"`` at ``'highest'`` or in float64; ``"hardware"`` on an NVIDIA GPU of
        compute capability ≥ 8.0; ``"emulated"`` otherwise (the run uses
        :func:`eigprec.emulate_tf32`).

    Example:
        >>> tf32_mode("cpu", "high", torch.float32)
        'emulated'
    """
    if fp32_matmul_prec == "highest" or dtype != torch.float32:
        return "none"
    return "hardware" if has_real_tf32(device) else "emulated"


@dataclass
class SpikeRun:
    """Everything recorded by one :func:`spike_experiment` run.

    Attributes:
        label: Short name of the configuration.
        config: The keyword arguments that produced the run.
        tf32: ``"none"``, ``"hardware"`` or ``"emulated"`` (see :func:`tf32_mode`).
        Q_L: ``(steps, m, m)`` left eigenbasis after every step (CPU).
        eig_L: ``(steps, m)`` eigenvalues of the stored L after every step, descending,
            computed in float64 (the spectrum of the matrix the optimizer actually holds).
        eig_R: ``(steps, n)`` same for R.
        approx_L: ``(steps, m)`` approximate eigenvalues diag(Q_Lᵀ L Q_L) that KL-Shampoo
            used at each step (from the previous step's L and Q_L, before clamping; NaN
            when not available, e.g. for the library or without KL-Shampoo).
        approx_R: ``(steps, n)`` same for R.
        clamped_L: ``(steps,)`` how many approximate eigenvalues of L were below the floor.
        clamped_R: ``(steps,)`` same for R.
        rel_change_L: ``(steps,)`` ‖L_t − L_{t−1}‖_F / ‖L_t‖_F.
        rel_change_R: ``(steps,)`` same for R.
        seconds: Wall-clock seconds spent inside ``optimizer.step()`` over the whole run.
        factors: ``{step: (L, R)}`` copies of the stored factors (optimizer dtype, CPU) after
            the steps listed in ``keep_factors``.

    Example:
        >>> run = spike_experiment("SOAP", "highest", shape=(8, 4), steps=6, spike_step=3)
        >>> (run.steps, run.tf32, run.eig_R.shape, sorted(run.factors))
        (6, 'none', torch.Size([6, 4]), [2, 3, 4])
    """

    label: str
    config: dict[str, Any]
    tf32: str
    Q_L: torch.Tensor
    eig_L: torch.Tensor
    eig_R: torch.Tensor
    approx_L: torch.Tensor
    approx_R: torch.Tensor
    clamped_L: torch.Tensor
    clamped_R: torch.Tensor
    rel_change_L: torch.Tensor
    rel_change_R: torch.Tensor
    seconds: float
    factors: dict[int, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)

    @property
    def steps(self) -> int:
        """Number of recorded steps."""
        return self.Q_L.shape[0]

    def top1_angles(self, ref_step: int) -> torch.Tensor:
        """Top-1 angle (degrees) of Q_L at every step against Q_L at ``ref_step``.

        Args:
            ref_step: 0-based step of the reference basis.

        Returns:
            ``(steps,)`` float64 tensor.
        """
        ref = self.Q_L[ref_step]
        return torch.tensor([top1_angle(ref, q) for q in self.Q_L], dtype=torch.float64)

    def subspace_angles(self, ref_step: int, k: int = 8) -> torch.Tensor:
        """Largest principal angle (degrees) of the top-``k`` subspace against ``ref_step``.

        Args:
            ref_step: 0-based step of the reference basis.
            k: Number of leading columns.

        Returns:
            ``(steps,)`` float64 tensor.
        """
        ref = self.Q_L[ref_step]
        return torch.tensor([subspace_angle(ref, q, k) for q in self.Q_L], dtype=torch.float64)


def _library_optimizer(param: torch.Tensor, kw: dict[str, Any]) -> torch.optim.Optimizer:
    from emerging_optimizers.soap import SOAP as LibrarySOAP  # Python ≥ 3.12 only

    lib_kw = {
        k: v
        for k, v in kw.items()
        if k not in ("dtype", "eps_mode", "eigval_dtype", "factor_matmul", "track_diagnostics")
    }
    return LibrarySOAP([param], **lib_kw)


def spike_experiment(
    method: Literal["SOAP", "REKLS"] = "SOAP",
    fp32_matmul_prec: Literal["highest", "high", "medium"] = "highest",
    *,
    qr_fp32_matmul_prec: str | None = None,
    dtype: torch.dtype = torch.float32,
    eps_mode: Literal["absolute", "relative"] = "absolute",
    eigval_dtype: torch.dtype | None = None,
    factor_matmul: Literal["native", "3xtf32"] = "native",
    shape: tuple[int, int] = (128, 64),
    steps: int = 200,
    spike_step: int = 50,
    spike_scale: float = 1000.0,
    lr: float = 1.0,
    betas: tuple[float, float] = (0.9, 0.95),
    shampoo_beta: float = 0.95,
    eps: float = 1e-8,
    power_iter_steps: int = 1,
    seed: int = 0,
    device: str = "cpu",
    implementation: Literal["reference", "library"] = "reference",
    label: str | None = None,
    progress: Callable[[Iterable[int]], Iterable[int]] | None = None,
    keep_factors: Sequence[int] | None = None,
) -> SpikeRun:
    """One 2-D parameter, i.i.d. N(0, 1) gradients, one of them scaled by ``spike_scale``.

    Gradients are drawn in float32 from ``torch.Generator().manual_seed(seed)`` (the same
    sequence for every configuration, whatever ``dtype``), the one of step ``spike_step``
    (0-based) is multiplied by ``spike_scale``, weight decay is 0 and KL-Shampoo is on.
    ``method="SOAP"`` refreshes the basis by ``power_iter_steps`` of orthogonal iteration,
    ``"REKLS"`` by ``eigh`` every step. When the requested precision allows TF32 and the
    device has none, the whole run executes under :func:`eigprec.emulate_tf32`, which rounds
    exactly those products the optimizer runs at TF32.

    Args:
        method: ``"SOAP"`` or ``"REKLS"``.
        fp32_matmul_prec: Precision of the factor updates and projections.
        qr_fp32_matmul_prec: Precision of the basis refresh; ``None`` = ``fp32_matmul_prec``.
        dtype: Optimizer dtype (float64 = ground truth).
        eps_mode: ``"absolute"`` or ``"relative"`` eigenvalue floor (see :class:`SOAP`).
        eigval_dtype: Dtype of the approximate eigenvalues (``None`` = ``dtype``).
        factor_matmul: ``"native"`` or ``"3xtf32"`` factor-update products.
        shape: Parameter shape (m, n).
        steps: Number of optimizer steps.
        spike_step: 0-based step whose gradient is scaled; may be ≥ ``steps`` (no spike).
        spike_scale: Factor of the spike.
        lr: Learning rate.
        betas: Adam's betas.
        shampoo_beta: Factor EMA coefficient.
        eps: Adam's ε and the eigenvalue floor.
        power_iter_steps: Orthogonal-iteration rounds per step (SOAP).
        seed: Gradient seed.
        device: Device of the parameter and optimizer state.
        implementation: ``"reference"`` (:class:`eigprec.SOAP`) or ``"library"``
            (``emerging_optimizers.soap.SOAP``; needs Python ≥ 3.12 and records no
            approximate eigenvalues or clamp counts).
        label: Name stored in the result; default derived from the configuration.
        progress: Optional wrapper of the step range (e.g. :func:`eigprec.progress`).
        keep_factors: Steps after which to keep copies of L and R; default the step before
            the spike, the spike step and the one after.

    Returns:
        A :class:`SpikeRun`.

    Raises:
        ValueError: on an unknown method/implementation or a non-positive step count,
            plus the optimizer's own errors.
        ImportError: if ``implementation="library"`` and emerging-optimizers is missing.

    Example:
        >>> run = spike_experiment("REKLS", "highest", shape=(8, 4), steps=6, spike_step=3)
        >>> run.Q_L.shape
        torch.Size([6, 8, 8])
    """
    if method not in ("SOAP", "REKLS"):
        raise ValueError(f"method must be 'SOAP' or 'REKLS', got {method!r}")
    if implementation not in ("reference", "library"):
        raise ValueError(f"implementation must be 'reference' or 'library', got {implementation!r}")
    if steps < 1:
        raise ValueError(f"steps must be ≥ 1, got {steps}")
    if len(shape) != 2 or min(shape) < 1:
        raise ValueError(f"shape must be two positive sizes, got {shape}")
    qr_prec = fp32_matmul_prec if qr_fp32_matmul_prec is None else qr_fp32_matmul_prec
    config = {
        "method": method,
        "fp32_matmul_prec": fp32_matmul_prec,
        "qr_fp32_matmul_prec": qr_prec,
        "dtype": dtype,
        "eps_mode": eps_mode,
        "eigval_dtype": eigval_dtype,
        "factor_matmul": factor_matmul,
        "shape": tuple(shape),
        "steps": steps,
        "spike_step": spike_step,
        "spike_scale": spike_scale,
        "lr": lr,
        "betas": tuple(betas),
        "shampoo_beta": shampoo_beta,
        "eps": eps,
        "power_iter_steps": power_iter_steps,
        "seed": seed,
        "device": device,
        "implementation": implementation,
    }
    opt_kw: dict[str, Any] = {
        "lr": lr,
        "betas": tuple(betas),
        "shampoo_beta": shampoo_beta,
        "eps": eps,
        "weight_decay": 0.0,
        "use_kl_shampoo": True,
        "use_eigh": method == "REKLS",
        "power_iter_steps": power_iter_steps,
        "fp32_matmul_prec": fp32_matmul_prec,
        "qr_fp32_matmul_prec": qr_prec,
        "dtype": dtype,
        "eps_mode": eps_mode,
        "eigval_dtype": eigval_dtype,
        "factor_matmul": factor_matmul,
        "track_diagnostics": True,
    }
    m, n = shape
    param = torch.nn.Parameter(torch.zeros(m, n, dtype=dtype, device=device))
    if implementation == "library":
        if (
            dtype != torch.float32
            or eps_mode != "absolute"
            or eigval_dtype is not None
            or factor_matmul != "native"
        ):
            raise ValueError(
                "the library supports only dtype=float32, eps_mode='absolute', native products"
            )
        optimizer = _library_optimizer(param, opt_kw)
    else:
        optimizer = SOAP([param], **opt_kw)
    mode = tf32_mode(device, fp32_matmul_prec, dtype)
    qr_mode = tf32_mode(device, qr_prec, dtype)
    emulate = "emulated" in (mode, qr_mode)
    context = contextlib.ExitStack()
    # The library restores precision through the legacy setter, which leaves torch ≥ 2.9's
    # fp32_precision attributes changed ("none" becomes "ieee"); this restores them exactly.
    context.enter_context(matmul_precision(current_matmul_precision()))
    if emulate:
        context.enter_context(emulate_tf32())

    gen = torch.Generator().manual_seed(seed)
    nan_m = torch.full((m,), math.nan, dtype=torch.float64)
    nan_n = torch.full((n,), math.nan, dtype=torch.float64)
    rec: dict[str, list[Any]] = {
        k: []
        for k in (
            "Q_L",
            "eig_L",
            "eig_R",
            "approx_L",
            "approx_R",
            "clamped_L",
            "clamped_R",
            "rel_change_L",
            "rel_change_R",
        )
    }
    keep = (
        {spike_step - 1, spike_step, spike_step + 1} if keep_factors is None else set(keep_factors)
    )
    factors: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
    prev_L = prev_R = None
    seconds = 0.0
    step_range: Iterable[int] = range(steps) if progress is None else progress(range(steps))
    with context:
        for k in step_range:
            grad = torch.randn(m, n, generator=gen)
            if k == spike_step:
                grad = grad * spike_scale
            param.grad = grad.to(device=device, dtype=dtype)
            start = time.perf_counter()
            optimizer.step()
            if param.device.type == "cuda":
                torch.cuda.synchronize(param.device)
            seconds += time.perf_counter() - start
            state = optimizer.state[param]
            # copy=True: for float64 CPU state .to() would alias the tensor the optimizer
            # keeps updating in place, and the per-step change would read as zero.
            L = state["L"].detach().to("cpu", torch.float64, copy=True)
            R = state["R"].detach().to("cpu", torch.float64, copy=True)
            rec["Q_L"].append(state["Q_L"].detach().to("cpu").clone())
            if k in keep:
                factors[k] = (
                    state["L"].detach().to("cpu").clone(),
                    state["R"].detach().to("cpu").clone(),
                )
            rec["eig_L"].append(torch.linalg.eigvalsh(L).flip(0))
            rec["eig_R"].append(torch.linalg.eigvalsh(R).flip(0))
            diag = getattr(optimizer, "diagnostics", {}).get(param, {})
            rec["approx_L"].append(diag.get("approx_L", nan_m))
            rec["approx_R"].append(diag.get("approx_R", nan_n))
            rec["clamped_L"].append(diag.get("clamped_L", -1))
            rec["clamped_R"].append(diag.get("clamped_R", -1))
            for key, now, before in (("L", L, prev_L), ("R", R, prev_R)):
                size = torch.linalg.matrix_norm(now).item()
                delta = now if before is None else now - before
                rec[f"rel_change_{key}"].append(
                    torch.linalg.matrix_norm(delta).item() / size if size > 0 else math.inf
                )
            prev_L, prev_R = L, R

    if label is None:
        parts = [method, fp32_matmul_prec]
        if qr_prec != fp32_matmul_prec:
            parts.append(f"qr={qr_prec}")
        if dtype != torch.float32:
            parts.append(str(dtype).removeprefix("torch."))
        if eps_mode != "absolute":
            parts.append(f"eps={eps_mode}")
        if eigval_dtype is not None:
            parts.append(f"eigvals={str(eigval_dtype).removeprefix('torch.')}")
        if factor_matmul != "native":
            parts.append(factor_matmul)
        if implementation == "library":
            parts.append("library")
        label = " ".join(parts)
    return SpikeRun(
        label=label,
        config=config,
        tf32="emulated" if emulate else ("hardware" if "hardware" in (mode, qr_mode) else "none"),
        Q_L=torch.stack(rec["Q_L"]),
        eig_L=torch.stack(rec["eig_L"]),
        eig_R=torch.stack(rec["eig_R"]),
        approx_L=torch.stack(rec["approx_L"]),
        approx_R=torch.stack(rec["approx_R"]),
        clamped_L=torch.tensor(rec["clamped_L"]),
        clamped_R=torch.tensor(rec["clamped_R"]),
        rel_change_L=torch.tensor(rec["rel_change_L"], dtype=torch.float64),
        rel_change_R=torch.tensor(rec["rel_change_R"], dtype=torch.float64),
        seconds=seconds,
        factors=factors,
    )


def library_soap_defaults() -> dict[str, Any] | None:
    """Keyword defaults of the installed ``emerging_optimizers.soap.SOAP``, without importing it.

    The library declares Python ≥ 3.12 and fails to import on 3.11, but its defaults (e.g.
    ``fp32_matmul_prec``) are worth stating wherever it is installed, so they are read from
    the source file with :mod:`ast`.

    Returns:
        ``{"version": ..., "<argument>": default, ...}`` for the literal defaults of
        ``SOAP.__init__``, or ``None`` when the distribution is not installed.

    Example:
        >>> d = library_soap_defaults()
        >>> d is None or d["fp32_matmul_prec"] in ("high", "highest")
        True
    """
    import ast
    from importlib import metadata

    try:
        dist = metadata.distribution("emerging-optimizers")
    except metadata.PackageNotFoundError:
        return None
    source = dist.locate_file("emerging_optimizers/soap/soap.py")
    tree = ast.parse(open(source, encoding="utf-8").read())
    out: dict[str, Any] = {"version": dist.version}
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "SOAP":
            init = next(
                f for f in node.body if isinstance(f, ast.FunctionDef) and f.name == "__init__"
            )
            args = init.args
            positional = args.args[len(args.args) - len(args.defaults) :]
            pairs = list(zip(positional, args.defaults, strict=True))
            pairs += [
                (a, d)
                for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True)
                if d is not None
            ]
            for arg, default in pairs:
                try:
                    out[arg.arg] = ast.literal_eval(default)
                except ValueError:
                    continue
    return out


def spike_angle_table(
    runs: Sequence[SpikeRun],
    ref_step: int = 49,
    offsets: Sequence[int] = (1, 2, 5, 10),
    k: int = 8,
) -> list[dict[str, Any]]:
    """Angles of Q_L against the pre-spike basis, at offsets before and after it.

    The offset ``-N`` is step ``ref_step − N`` and ``+N`` is step ``ref_step + N``; with the
    spike at step 50 and ``ref_step=49``, ``+1`` is the basis right after the spike step.

    Args:
        runs: Recorded runs.
        ref_step: 0-based step of the reference basis (the last one before the spike).
        offsets: Positive offsets N; the table has columns −N and +N.
        k: Size of the leading subspace for the principal-angle rows.

    Returns:
        Rows ``{"run", "quantity", "-10", …, "+10"}`` with angles in degrees; two rows per
        run: ``"top-1"`` and ``f"top-{k} subspace"``.

    Raises:
        ValueError: if an offset falls outside a run.

    Example:
        >>> run = spike_experiment("REKLS", "highest", shape=(8, 4), steps=8, spike_step=4)
        >>> rows = spike_angle_table([run], ref_step=3, offsets=(1, 2), k=2)
        >>> [r["quantity"] for r in rows]
        ['top-1', 'top-2 subspace']
    """
    cols = [-o for o in sorted(offsets, reverse=True)] + sorted(offsets)
    rows = []
    for run in runs:
        for off in cols:
            if not 0 <= ref_step + off < run.steps:
                raise ValueError(
                    f"offset {off:+d} from step {ref_step} is outside run {run.label!r}"
                )
        ref = run.Q_L[ref_step]
        top = {"run": run.label, "quantity": "top-1"}
        sub = {"run": run.label, "quantity": f"top-{k} subspace"}
        for off in cols:
            q = run.Q_L[ref_step + off]
            top[f"{off:+d}"] = top1_angle(ref, q)
            sub[f"{off:+d}"] = subspace_angle(ref, q, k)
        rows += [top, sub]
    return rows


def ema_first_weight(shampoo_beta: float, t: int) -> float:
    """Weight of the first update in a bias-corrected EMA after ``t`` updates.

    With β_t = 1 − (1 − β)/(1 − βᵗ), the factor after t updates is the weighted mean
    Σ_k (1 − β) β^{t−k} X_k / (1 − βᵗ); the first term's weight is (1 − β) β^{t−1}/(1 − βᵗ).

    Args:
        shampoo_beta: β in [0, 1).
        t: Number of updates, ≥ 1.

    Returns:
        The weight of X_1.

    Raises:
        ValueError: if β or t is out of range.

    Example:
        >>> ema_first_weight(0.5, 1)
        1.0
    """
    if not 0 <= shampoo_beta < 1:
        raise ValueError(f"shampoo_beta must be in [0, 1), got {shampoo_beta}")
    if t < 1:
        raise ValueError(f"t must be ≥ 1, got {t}")
    if shampoo_beta == 0:
        return 1.0 if t == 1 else 0.0
    return (1 - shampoo_beta) * shampoo_beta ** (t - 1) / (1 - shampoo_beta**t)


# -- 3. numbers for the prose -------------------------------------------------------------


def printed_bound(value: float, spec: str, side: str) -> float:
    """The tightest number that ``format(·, spec)`` prints as a true bound on ``value``.

    A sentence "turns by at least 82°" printed from 81.66 with ``:.0f`` is false; rounding to
    nearest is wrong for bounds. This rounds down (``side="lower"``, for "at least") or up
    (``side="upper"``, for "at most", "within", "up to") to the last digit that ``spec``
    shows, so that the printed text, read back as a number, still bounds ``value``.

    Args:
        value: The measured number; finite.
        spec: A fixed-point or exponent format such as ``".0f"``, ``".3f"`` or ``".1e"``.
        side: ``"lower"`` or ``"upper"``.

    Returns:
        A float whose ``format(·, spec)`` is ≤ ``value`` (lower) or ≥ ``value`` (upper) and
        differs from the nearest-rounded text by at most one unit of its last digit.

    Raises:
        ValueError: if ``value`` is not finite, ``spec`` is not ``.<digits>f`` or
            ``.<digits>e``, or ``side`` is neither ``"lower"`` nor ``"upper"``.

    Example:
        >>> format(printed_bound(81.66, ".0f", "lower"), ".0f")
        '81'
        >>> format(printed_bound(1.23e-5, ".1e", "upper"), ".1e")
        '1.3e-05'
    """
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"value must be finite, got {value}")
    if side not in ("lower", "upper"):
        raise ValueError(f"side must be 'lower' or 'upper', got {side!r}")
    if len(spec) < 3 or spec[0] != "." or spec[-1] not in "fe" or not spec[1:-1].isdigit():
        raise ValueError(f"spec must look like '.3f' or '.1e', got {spec!r}")
    digits = int(spec[1:-1])
    sign = 1.0 if side == "upper" else -1.0
    shown = float(format(value, spec))
    # At most two steps: one digit unit past the rounded text always passes value.
    while (shown < value) if side == "upper" else (shown > value):
        if spec[-1] == "f":
            unit = 10.0**-digits
        else:
            exponent = int(format(shown, spec).split("e")[1])
            unit = 10.0 ** (exponent - digits)
        shown = float(format(shown + sign * unit, spec))
    return shown
