"""The spike experiment of the chapter "Eigenbasis degeneracy": one SOAP/REKLS run on i.i.d.
Gaussian gradients with one gradient multiplied by 1000, recording the left eigenbasis Q_L
after every step and the spectral diagnostics that explain what the spike does at each
precision; :func:`spike_angle_table` turns recorded runs into the chapter's tables.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from eigprec.precision import current_matmul_precision, matmul_precision
from eigprec.soap import SOAP
from eigprec.subspace import subspace_angle, top1_angle
from eigprec.tf32 import emulate_tf32, tf32_mode

__all__ = [
    "SpikeConfig",
    "SpikeRun",
    "library_soap_class",
    "library_soap_defaults",
    "spike_angle_table",
    "spike_experiment",
]


# -- 2. the spike experiment --------------------------------------------------------------


@dataclass(frozen=True)
class SpikeConfig:
    """One configuration of :func:`spike_experiment`: the optimizer, its precisions and the run.

    Gradients are drawn in float32 from ``torch.Generator().manual_seed(seed)`` (the same
    sequence for every configuration, whatever ``dtype``); the one of step ``spike_step``
    (0-based) is multiplied by ``spike_scale``; weight decay is 0 and KL-Shampoo is on.

    Attributes:
        method: ``"SOAP"`` (basis refreshed by ``power_iter_steps`` of orthogonal iteration)
            or ``"REKLS"`` (``eigh`` every step).
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
            (``emerging_optimizers.soap.SOAP``; see :func:`library_soap_class`; records no
            approximate eigenvalues or clamp counts).

    Example:
        >>> cfg = SpikeConfig("REKLS", "high")
        >>> cfg.replace(dtype=torch.float64).label
        'REKLS high float64'
    """

    method: Literal["SOAP", "REKLS"] = "SOAP"
    fp32_matmul_prec: Literal["highest", "high", "medium"] = "highest"
    qr_fp32_matmul_prec: str | None = None
    dtype: torch.dtype = torch.float32
    eps_mode: Literal["absolute", "relative"] = "absolute"
    eigval_dtype: torch.dtype | None = None
    factor_matmul: Literal["native", "3xtf32"] = "native"
    shape: tuple[int, int] = (128, 64)
    steps: int = 200
    spike_step: int = 50
    spike_scale: float = 1000.0
    lr: float = 1.0
    betas: tuple[float, float] = (0.9, 0.95)
    shampoo_beta: float = 0.95
    eps: float = 1e-8
    power_iter_steps: int = 1
    seed: int = 0
    device: str = "cpu"
    implementation: Literal["reference", "library"] = "reference"

    def __post_init__(self) -> None:
        if self.method not in ("SOAP", "REKLS"):
            raise ValueError(f"method must be 'SOAP' or 'REKLS', got {self.method!r}")
        if self.implementation not in ("reference", "library"):
            raise ValueError(
                f"implementation must be 'reference' or 'library', got {self.implementation!r}"
            )
        for name in ("steps", "spike_step", "power_iter_steps", "seed"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{name} must be an int, got {type(value).__name__}")
        if self.steps < 1:
            raise ValueError(f"steps must be ≥ 1, got {self.steps}")
        shape = tuple(self.shape)
        if len(shape) != 2 or not all(isinstance(s, int) and s >= 1 for s in shape):
            raise ValueError(f"shape must be two positive int sizes, got {self.shape}")
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "betas", tuple(self.betas))
        if self.qr_fp32_matmul_prec is None:
            object.__setattr__(self, "qr_fp32_matmul_prec", self.fp32_matmul_prec)
        if self.implementation == "library" and (
            self.dtype != torch.float32
            or self.eps_mode != "absolute"
            or self.eigval_dtype is not None
            or self.factor_matmul != "native"
        ):
            raise ValueError(
                "the library supports only dtype=float32, eps_mode='absolute', native products"
            )

    def replace(self, **changes: Any) -> SpikeConfig:
        """A copy with some fields changed (``qr_fp32_matmul_prec`` follows a new
        ``fp32_matmul_prec`` unless given)."""
        if "fp32_matmul_prec" in changes and "qr_fp32_matmul_prec" not in changes:
            if self.qr_fp32_matmul_prec == self.fp32_matmul_prec:
                changes["qr_fp32_matmul_prec"] = None
        return dataclasses.replace(self, **changes)

    @property
    def label(self) -> str:
        """A short name: method and precision, then whatever differs from the defaults."""
        parts = [self.method, self.fp32_matmul_prec]
        if self.qr_fp32_matmul_prec != self.fp32_matmul_prec:
            parts.append(f"qr={self.qr_fp32_matmul_prec}")
        if self.dtype != torch.float32:
            parts.append(str(self.dtype).removeprefix("torch."))
        if self.eps_mode != "absolute":
            parts.append(f"eps={self.eps_mode}")
        if self.eigval_dtype is not None:
            parts.append(f"eigvals={str(self.eigval_dtype).removeprefix('torch.')}")
        if self.factor_matmul != "native":
            parts.append(self.factor_matmul)
        if self.implementation == "library":
            parts.append("library")
        return " ".join(parts)

    def optimizer_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of :class:`eigprec.SOAP` this configuration runs."""
        return {
            "lr": self.lr,
            "betas": self.betas,
            "shampoo_beta": self.shampoo_beta,
            "eps": self.eps,
            "weight_decay": 0.0,
            "use_kl_shampoo": True,
            "use_eigh": self.method == "REKLS",
            "power_iter_steps": self.power_iter_steps,
            "fp32_matmul_prec": self.fp32_matmul_prec,
            "qr_fp32_matmul_prec": self.qr_fp32_matmul_prec,
            "dtype": self.dtype,
            "eps_mode": self.eps_mode,
            "eigval_dtype": self.eigval_dtype,
            "factor_matmul": self.factor_matmul,
            "track_diagnostics": True,
        }


@dataclass(eq=False)  # tensors inside: compared by identity, as a recorded run is
class SpikeRun:
    """Everything recorded by one :func:`spike_experiment` run.

    Attributes:
        label: Short name of the configuration.
        config: The :class:`SpikeConfig` that produced the run.
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
        >>> run = spike_experiment(SpikeConfig(shape=(8, 4), steps=6, spike_step=3))
        >>> (run.steps, run.tf32, run.eig_R.shape, sorted(run.factors))
        (6, 'none', torch.Size([6, 4]), [2, 3, 4])
    """

    label: str
    config: SpikeConfig
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


def library_soap_class() -> type[torch.optim.Optimizer]:
    """``emerging_optimizers.soap.SOAP``, importable on Python 3.11 as well.

    emerging-optimizers 0.3.0 declares Python ≥ 3.12, but the only 3.12 name it uses is
    ``typing.override`` (PEP 698), a decorator without run-time effect. On 3.11 a no-op
    stand-in is placed in :mod:`typing` for the duration of the import only, so no global
    state is left changed.

    Returns:
        The library's SOAP class.

    Raises:
        ImportError: if emerging-optimizers is not installed.

    Example:
        >>> import importlib.util
        >>> found = importlib.util.find_spec("emerging_optimizers") is not None
        >>> not found or library_soap_class().__name__ == "SOAP"
        True
    """
    import typing

    missing = not hasattr(typing, "override")
    if missing:
        typing.override = lambda method: method  # type: ignore[attr-defined]
    try:
        from emerging_optimizers.soap import SOAP as LibrarySOAP
    finally:
        if missing:
            del typing.override  # type: ignore[attr-defined]
    return LibrarySOAP


def _library_optimizer(param: torch.Tensor, kw: dict[str, Any]) -> torch.optim.Optimizer:
    LibrarySOAP = library_soap_class()
    lib_kw = {
        k: v
        for k, v in kw.items()
        if k not in ("dtype", "eps_mode", "eigval_dtype", "factor_matmul", "track_diagnostics")
    }
    return LibrarySOAP([param], **lib_kw)


def spike_experiment(
    config: SpikeConfig | None = None,
    *,
    label: str | None = None,
    progress: Callable[[Iterable[int]], Iterable[int]] | None = None,
    keep_factors: Sequence[int] | None = None,
) -> SpikeRun:
    """One 2-D parameter, i.i.d. N(0, 1) gradients, one of them scaled by ``spike_scale``.

    When the configuration's precision allows TF32 and the device has none, the whole run
    executes under :func:`eigprec.emulate_tf32`, which rounds exactly those products the
    optimizer runs at TF32.

    Args:
        config: What to run (default: ``SpikeConfig()``, SOAP at 'highest').
        label: Name stored in the result; default ``config.label``.
        progress: Optional wrapper of the step range (e.g. :func:`eigprec_book.helpers.progress`).
        keep_factors: Steps after which to keep copies of L and R; default the step before
            the spike, the spike step and the one after.

    Returns:
        A :class:`SpikeRun`.

    Raises:
        TypeError: if ``config`` is not a :class:`SpikeConfig`.
        ImportError: if ``implementation="library"`` and emerging-optimizers is missing.

    Example:
        >>> run = spike_experiment(SpikeConfig("REKLS", shape=(8, 4), steps=6, spike_step=3))
        >>> run.Q_L.shape
        torch.Size([6, 8, 8])
    """
    config = SpikeConfig() if config is None else config
    if not isinstance(config, SpikeConfig):
        raise TypeError(f"config must be a SpikeConfig, got {type(config).__name__}")
    opt_kw = config.optimizer_kwargs()
    device, dtype, shape = config.device, config.dtype, config.shape
    spike_step, steps = config.spike_step, config.steps
    m, n = shape
    param = torch.nn.Parameter(torch.zeros(m, n, dtype=dtype, device=device))
    if config.implementation == "library":
        optimizer = _library_optimizer(param, opt_kw)
    else:
        optimizer = SOAP([param], **opt_kw)
    mode = tf32_mode(device, config.fp32_matmul_prec, dtype)
    qr_mode = tf32_mode(device, config.qr_fp32_matmul_prec, dtype)
    emulate = "emulated" in (mode, qr_mode)
    context = contextlib.ExitStack()
    # The library restores precision through the legacy setter, which leaves torch ≥ 2.9's
    # fp32_precision attributes changed ("none" becomes "ieee"); this restores them exactly.
    context.enter_context(matmul_precision(current_matmul_precision()))
    if emulate:
        context.enter_context(emulate_tf32())

    gen = torch.Generator().manual_seed(config.seed)
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
                grad = grad * config.spike_scale
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

    return SpikeRun(
        label=config.label if label is None else label,
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

    Read from the source file with :mod:`ast`, so that the defaults (e.g.
    ``fp32_matmul_prec``) can be stated without importing the library (which declares
    Python ≥ 3.12; :func:`library_soap_class` imports it on 3.11).

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
        >>> run = spike_experiment(SpikeConfig("REKLS", shape=(8, 4), steps=8, spike_step=4))
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
