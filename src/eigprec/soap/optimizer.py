"""A compact reference SOAP optimizer, with KL-Shampoo factor updates and REKLS.

SOAP (Vyas et al., arXiv 2409.11321) keeps Shampoo's Kronecker factors L ≈ E[G Gᵀ] and
R ≈ E[Gᵀ G] of a 2-D parameter, and runs Adam in the coordinates of their eigenbases Q_L,
Q_R. KL-Shampoo (Lin et al., arXiv 2509.03378) replaces the factor updates by the ones that
minimise a KL divergence, which whiten the gradient by the *other* factor:

    L ← β L + (1 − β)/n · G Q_R Λ_R⁻¹ Q_Rᵀ Gᵀ,     R ← β R + (1 − β)/m · Gᵀ Q_L Λ_L⁻¹ Q_Lᵀ G

for an m×n gradient G, where Λ = diag(Qᵀ F Q) are the *approximate* eigenvalues of a factor
F in its current (possibly stale) basis, clamped below by ``eps``. Those approximate
eigenvalues are the numerically delicate part: in reduced precision their absolute error
follows the largest eigenvalue, and the small ones become noise.

This module is written from the papers to reproduce the semantics of
``emerging_optimizers.soap.SOAP`` 0.3.0 (NVIDIA Emerging-Optimizers): the same constructor
arguments, state keys, order of operations, bias correction and precision contexts, so that
its behaviour can be studied and cross-checked on any machine. Options of ours that the
library lacks: ``dtype`` (float64 reference runs), ``eps_mode``, ``eigval_dtype``,
``factor_matmul`` and ``track_diagnostics``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any, Literal

import torch
from torch.optim import Optimizer

from eigprec._args import (
    check_flag,
    check_int,
    check_real,
    check_soap_gradient,
    check_soap_hyperparameters,
    check_soap_parameter,
    check_writable,
)
from eigprec.precision import matmul_precision
from eigprec.soap import core
from eigprec.soap.checkpoint import CheckpointedOptions
from eigprec.soap.checks import check_lr_fits, new_parameter, refuse_non_finite

__all__ = ["REKLS", "SOAP", "ema_first_weight"]

_PRECISIONS = ("highest", "high", "medium")
_WEIGHT_DECAY_METHODS = ("decoupled", "independent", "l2", "palm")
_FLAGS = ("nesterov", "correct_bias", "use_eigh", "use_kl_shampoo", "track_diagnostics")
# Optimizer-wide options that define the algorithm: saved by state_dict() and compared on
# load_state_dict(). track_diagnostics only records, so it is kept by pickling but not compared.
_ALGORITHM_OPTIONS = (
    "weight_decay_method",
    "nesterov",
    "correct_bias",
    "fp32_matmul_prec",
    "use_eigh",
    "qr_fp32_matmul_prec",
    "power_iter_steps",
    "max_update_rms",
    "use_kl_shampoo",
    "correct_shampoo_beta_bias",
    "dtype",
    "eps_mode",
    "eigval_dtype",
    "factor_matmul",
)
_OPTIONS = (*_ALGORITHM_OPTIONS, "track_diagnostics")
_STATE_TENSORS = ("L", "R", "Q_L", "Q_R", "exp_avg", "exp_avg_sq")
# What a step checks for overflow before committing (L and R first: eigh reads them; the
# parameter last, as the state's overflow is the likelier cause of its own).
_CHECKED = (*_STATE_TENSORS, "update", "param")


class SOAP(CheckpointedOptions, Optimizer):
    """SOAP: Adam in the eigenbasis of Shampoo's Kronecker factors (reference version).

    Each step, for every 2-D parameter with gradient G (m×n):

    1. Update the factors L, R (plain ``G Gᵀ``/``Gᵀ G`` or KL-Shampoo), under
       ``fp32_matmul_prec``, with β bias-corrected to ``1 − (1 − β)/(1 − βᵗ)``.
    2. Under ``qr_fp32_matmul_prec``: rotate Adam's first moment back to the parameter
       basis; sort each basis by descending approximate eigenvalues diag(QᵀFQ), permuting
       the second moment to match; refresh the basis by ``eigh`` (first step always, every
       step if ``use_eigh``) or by ``power_iter_steps`` of orthogonal iteration
       Q ← qr(F Q); rotate the first moment into the new basis.
    3. Weight decay; project G into the eigenbasis; an Adam step there; project back;
       optional RMS clipping; ``p ← p − lr · update``.

    Args:
        params: Parameters (all 2-D and real), named parameters (``(name, tensor)``, as
            ``model.named_parameters()`` gives) or parameter groups.
        lr: Learning rate, ≥ 0.
        betas: Adam's (β₁, β₂), each in [0, 1).
        shampoo_beta: EMA coefficient of the Kronecker factors, in [0, 1).
        eps: Adam's ε, and the floor of the approximate eigenvalues in KL-Shampoo.
        weight_decay: Weight decay coefficient, ≥ 0.
        weight_decay_method: ``"decoupled"`` (p ← p − lr·wd·p), ``"independent"``
            (p ← p − wd·p), ``"l2"`` (added to the gradient after the factor update) or
            ``"palm"`` (p ← p − lr²·wd·p), as in the library.
        nesterov: Nesterov momentum in the inner Adam.
        correct_bias: Adam bias correction (and, by default, the factors' β correction).
        fp32_matmul_prec: Float32 matmul precision of the factor updates and projections.
            Emerging-Optimizers 0.3.0 defaults to ``'high'`` (TF32 on NVIDIA GPUs); later
            releases changed it to ``'highest'``. We keep 0.3.0's default to match it.
        use_eigh: Refresh the basis by ``eigh`` every step instead of orthogonal iteration.
        qr_fp32_matmul_prec: Float32 matmul precision of the basis refresh (sorting, power
            iteration, moment rotation); 0.3.0 default ``'high'``.
        power_iter_steps: Rounds of orthogonal iteration per step, ≥ 0.
        max_update_rms: Clip the update's RMS to this value; 0 disables clipping.
        use_kl_shampoo: KL-Shampoo factor updates.
        correct_shampoo_beta_bias: Bias-correct ``shampoo_beta``; ``None`` follows
            ``correct_bias``.
        dtype: Dtype of all optimizer state and arithmetic (float32 or float64). float64
            runs are the ground truth of the book's experiments: the matmul precision
            setting does not touch float64 products.
        eps_mode: ``"absolute"`` clamps approximate eigenvalues at ``eps`` (the library);
            ``"relative"`` clamps at ``eps × max approximate eigenvalue`` (floor ``eps``
            while the factor is still zero), so the floor follows the factor's scale.
        eigval_dtype: Dtype in which the approximate eigenvalues diag(QᵀFQ) are computed
            (``None``: ``dtype``). ``torch.float64`` is one of the book's remedies.
        factor_matmul: ``"native"`` or ``"3xtf32"``: compute the products of the factor
            update with :func:`eigprec.matmul_3xtf32` (error-compensated TF32).
        track_diagnostics: Record per-step diagnostics in ``self.diagnostics[p]``: the
            approximate eigenvalues used by KL-Shampoo (before clamping), how many were
            clamped, the floor, and ‖ΔF‖_F/‖F‖_F of each factor.

    Numbers may be Python or NumPy scalars (stored as Python floats/ints) but not bools;
    flags must be bools (a truthy string such as ``"no"`` is refused). The per-group
    hyperparameters (``lr``, ``betas``, ``shampoo_beta``, ``eps``, ``weight_decay``) are
    checked here, in :meth:`add_param_group` and again at every :meth:`step`. The options
    travel with ``copy.deepcopy``/``pickle``/``torch.save`` and in ``state_dict()``.

    Raises:
        TypeError: if a parameter is not a dense, real 2-D tensor of a floating dtype
            (complex, integer and bool ones are refused), ``params`` of a group is a set,
            ``dtype`` is not float32/float64, a number is not a real number (or is a bool)
            or a flag is not a bool.
        ValueError: on an out-of-range hyperparameter or unknown option name, a parameter
            listed twice in a group (torch warns; SOAP would step it twice) or in two
            groups (as torch), or a parameter a step could not write in place: an inference
            tensor (outside ``torch.inference_mode``), or an expanded or overlapping view
            whose elements share memory.

    Example:
        >>> import torch
        >>> w = torch.nn.Parameter(torch.zeros(4, 3))
        >>> opt = SOAP([w], lr=0.1, use_kl_shampoo=True, fp32_matmul_prec="highest")
        >>> w.grad = torch.ones(4, 3)
        >>> opt.step()
        >>> sorted(opt.state[w])
        ['L', 'Q_L', 'Q_R', 'R', 'exp_avg', 'exp_avg_sq', 'step']
    """

    _OPTIONS = _OPTIONS
    _ALGORITHM_OPTIONS = _ALGORITHM_OPTIONS

    def __init__(
        self,
        params: Iterable[torch.Tensor] | Iterable[dict[str, Any]],
        lr: float,
        betas: tuple[float, float] = (0.9, 0.95),
        shampoo_beta: float = 0.95,
        eps: float = 1e-8,
        weight_decay: float = 0.01,
        *,
        weight_decay_method: str = "decoupled",
        nesterov: bool = False,
        correct_bias: bool = True,
        fp32_matmul_prec: Literal["highest", "high", "medium"] = "high",
        use_eigh: bool = False,
        qr_fp32_matmul_prec: Literal["highest", "high", "medium"] = "high",
        power_iter_steps: int = 1,
        max_update_rms: float = 0.0,
        use_kl_shampoo: bool = False,
        correct_shampoo_beta_bias: bool | None = None,
        dtype: torch.dtype = torch.float32,
        eps_mode: Literal["absolute", "relative"] = "absolute",
        eigval_dtype: torch.dtype | None = None,
        factor_matmul: Literal["native", "3xtf32"] = "native",
        track_diagnostics: bool = False,
    ) -> None:
        defaults = check_soap_hyperparameters(
            {
                "lr": lr,
                "betas": betas,
                "shampoo_beta": shampoo_beta,
                "eps": eps,
                "weight_decay": weight_decay,
            },
            "SOAP",
        )
        if weight_decay_method not in _WEIGHT_DECAY_METHODS:
            raise ValueError(
                f"weight_decay_method must be one of {_WEIGHT_DECAY_METHODS}, "
                f"got {weight_decay_method!r}"
            )
        for name, prec in (
            ("fp32_matmul_prec", fp32_matmul_prec),
            ("qr_fp32_matmul_prec", qr_fp32_matmul_prec),
        ):
            if prec not in _PRECISIONS:
                raise ValueError(f"{name} must be one of {_PRECISIONS}, got {prec!r}")
        values = (nesterov, correct_bias, use_eigh, use_kl_shampoo, track_diagnostics)
        flags = {name: check_flag(name, v) for name, v in zip(_FLAGS, values, strict=True)}
        if correct_shampoo_beta_bias is not None:
            correct_shampoo_beta_bias = check_flag(
                "correct_shampoo_beta_bias", correct_shampoo_beta_bias
            )
        power_iter_steps = check_int("power_iter_steps", power_iter_steps, low=0)
        max_update_rms = check_real("max_update_rms", max_update_rms, low=0.0)
        if dtype not in (torch.float32, torch.float64):
            raise TypeError(f"dtype must be torch.float32 or torch.float64, got {dtype!r}")
        if eigval_dtype not in (None, torch.float32, torch.float64):
            raise TypeError(f"eigval_dtype must be None, float32 or float64, got {eigval_dtype!r}")
        if eps_mode not in ("absolute", "relative"):
            raise ValueError(f"eps_mode must be 'absolute' or 'relative', got {eps_mode!r}")
        if factor_matmul not in ("native", "3xtf32"):
            raise ValueError(f"factor_matmul must be 'native' or '3xtf32', got {factor_matmul!r}")

        self.nesterov = flags["nesterov"]
        self.correct_bias = flags["correct_bias"]
        self.weight_decay_method = weight_decay_method
        self.fp32_matmul_prec = fp32_matmul_prec
        self.use_eigh = flags["use_eigh"]
        self.qr_fp32_matmul_prec = qr_fp32_matmul_prec
        self.power_iter_steps = power_iter_steps
        self.max_update_rms = max_update_rms
        self.use_kl_shampoo = flags["use_kl_shampoo"]
        self.correct_shampoo_beta_bias = (
            self.correct_bias if correct_shampoo_beta_bias is None else correct_shampoo_beta_bias
        )
        self.dtype = dtype
        self.eps_mode = eps_mode
        self.eigval_dtype = dtype if eigval_dtype is None else eigval_dtype
        self.factor_matmul = factor_matmul
        self.track_diagnostics = flags["track_diagnostics"]
        self.diagnostics: dict[torch.Tensor, dict[str, Any]] = {}
        super().__init__(params, defaults)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Add a parameter group, checking its parameters and hyperparameters first.

        Args:
            param_group: As for :meth:`torch.optim.Optimizer.add_param_group` (named
                parameters, ``(name, tensor)`` pairs, included); hyperparameters it leaves
                out come from the constructor's.

        Raises:
            TypeError: if ``params`` is a set, a parameter is not a dense, real 2-D tensor of
                a floating dtype, or a hyperparameter is not a real number (bools and
                tensors are not; NumPy scalars are, stored as floats).
            ValueError: if a hyperparameter is out of range (see :class:`SOAP`), the group
                lists a parameter twice (it would be stepped twice), or a parameter cannot
                be written in place (see :class:`SOAP`).
        """
        if not isinstance(param_group, dict):
            raise TypeError(f"param_group must be a dict, got {type(param_group).__name__}")
        params = param_group["params"]
        if isinstance(params, set):  # as torch refuses it: a set's order changes between runs
            raise TypeError("a param group's params must be an ordered collection, not a set")
        params = [params] if isinstance(params, torch.Tensor) else list(params)
        where = f"param group {len(getattr(self, 'param_groups', []))}"
        for i, p in enumerate(params):
            check_soap_parameter(p, f"parameter {i} of {where}")
        first: dict[int, int] = {}
        for i, p in enumerate(params):
            j = first.setdefault(id(p[1] if isinstance(p, tuple) else p), i)
            if j != i:  # torch only warns (pytorch issue 40967); here it is a wrong result
                raise ValueError(
                    f"parameter {i} of {where} is parameter {j} again: SOAP would step it "
                    "twice per step(); list each parameter once"
                )
        hyper = check_soap_hyperparameters({**self.defaults, **param_group}, where)
        super().add_param_group({**param_group, **hyper, "params": params})

    # -- products ---------------------------------------------------------------------------

    def _mm(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        if self.factor_matmul == "3xtf32" and a.dtype == torch.float32:
            from eigprec.tf32 import matmul_3xtf32  # lazy: only this option needs it

            return matmul_3xtf32(a, b)
        return a @ b

    def _approx_eigvals(self, factor: torch.Tensor, basis: torch.Tensor) -> torch.Tensor:
        f = factor.to(self.eigval_dtype)
        q = basis.to(self.eigval_dtype)
        mm = self._mm if self.eigval_dtype == factor.dtype else torch.matmul
        return core.approximate_eigenvalues(f, q, mm)

    # -- the four stages of a step ----------------------------------------------------------

    def _update_factors(
        self, state: dict[str, Any], grad: torch.Tensor, beta: float, eps: float, diag: dict
    ) -> tuple[torch.Tensor, torch.Tensor]:
        L, R = state["L"], state["R"]
        if not self.use_kl_shampoo:
            new_L, new_R = core.factor_targets(grad, None, self._mm)
        else:
            # Both corrections are computed from the factors *before* either is updated.
            whiteners = []
            for side, (factor, basis) in enumerate(((L, state["Q_L"]), (R, state["Q_R"]))):
                approx = self._approx_eigvals(factor, basis)
                floor: float | torch.Tensor = eps
                if self.eps_mode == "relative" and approx.numel():  # empty: no maximum
                    # Kept on the device: reading the maximum back would stall a GPU
                    # once per factor and step.
                    top = approx.max()
                    floor = torch.where(top > 0, eps * top, torch.full_like(top, eps))
                whiteners.append(core.kl_whitener(basis, approx, floor, grad.shape[side], self._mm))
                if self.track_diagnostics:
                    key = "LR"[side]
                    diag[f"approx_{key}"] = approx.detach().to("cpu", torch.float64)
                    diag[f"clamped_{key}"] = int((approx < floor).sum().item())
                    diag[f"floor_{key}"] = float(floor)
            new_L, new_R = core.factor_targets(grad, tuple(whiteners), self._mm)
        new_L, new_R = L.lerp(new_L, 1.0 - beta), R.lerp(new_R, 1.0 - beta)
        if self.track_diagnostics:
            for key, before, after in (("L", L, new_L), ("R", R, new_R)):
                size = torch.linalg.matrix_norm(after.double()).item()
                change = torch.linalg.matrix_norm((after - before).double()).item()
                diag[f"rel_change_{key}"] = change / size if size > 0 else math.inf
        return new_L, new_R

    def _refresh_basis(self, state: dict[str, Any], eigh_now: bool) -> None:
        approx = (
            self._approx_eigvals(state["L"], state["Q_L"]),
            self._approx_eigvals(state["R"], state["Q_R"]),
        )
        core.refresh_bases(state, approx, eigh_now, self.power_iter_steps)

    def _adam_direction(
        self, state: dict[str, Any], g: torch.Tensor, group: dict[str, Any], t: int
    ) -> torch.Tensor:
        betas, eps = group["betas"], group["eps"]
        return core.adam_direction(state, g, betas, eps, t, self.correct_bias, self.nesterov)

    def _decay_factor(self, p: torch.Tensor, grad: torch.Tensor, group: dict[str, Any]) -> float:
        """The factor weight decay multiplies ``p`` by; "l2" adds to ``grad`` instead."""
        wd, lr = group["weight_decay"], group["lr"]
        if wd == 0:
            return 1.0
        if self.weight_decay_method == "decoupled":
            return 1.0 - lr * wd
        if self.weight_decay_method == "independent":
            return 1.0 - wd
        if self.weight_decay_method == "palm":
            return 1.0 - lr * lr * wd
        # l2: enters the Adam step, not the factors (they were updated already)
        grad.add_(p.detach().to(grad.dtype), alpha=wd)
        return 1.0

    # -- public API -------------------------------------------------------------------------

    def _init_state(self, p: torch.Tensor) -> dict[str, Any]:
        return core.init_state(p, self.dtype)

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> None:  # type: ignore[override]
        """Take one optimization step for every parameter that has a gradient.

        All or nothing: every group's hyperparameters, every gradient and whether every
        parameter can be written in place are checked first, then every parameter's new
        state and new value are computed without touching the old ones, and only when all
        of them are finite are they committed. A failed step
        leaves parameters, state and step counters as they were (at the cost of holding one
        new state and one copy of each parameter until the commit).

        Args:
            closure: Not supported; must be ``None``.

        Raises:
            ValueError: if a closure is given, a gradient contains NaN or inf, a group's
                hyperparameter is out of range, or the step would make a parameter's state
                or update non-finite (a finite gradient spike whose square overflows the
                state's dtype; use ``dtype=torch.float64`` or clip the gradient; or an
                ``eps`` that rounds to 0 in that dtype), or a parameter's new value (after
                weight decay and the update) non-finite in its dtype, or ``lr`` is beyond
                the range of a parameter's dtype (``1e39`` for float32), or a parameter
                cannot be written in place (an inference tensor outside
                ``torch.inference_mode``, a view whose elements share memory: one put into
                ``param_groups`` past the constructor's checks).
            TypeError: if a parameter is not 2-D or not of a floating dtype, a gradient is
                sparse, complex or on the meta device, or a group's hyperparameter is not a
                number.
        """
        if closure is not None:
            raise ValueError("SOAP does not support a closure; call step() after backward()")
        work = []
        for gi, group in enumerate(self.param_groups):
            hyper = check_soap_hyperparameters(group, f"param group {gi}")
            for pi, p in enumerate(group["params"]):
                if p.grad is None:
                    continue
                where = f"parameter {pi} of param group {gi}, shape {tuple(p.shape)}"
                if p.dim() != 2:
                    raise TypeError(f"SOAP preconditions 2-D parameters only; got {where}")
                if not p.is_floating_point():  # put into param_groups past the constructor
                    raise TypeError(
                        f"SOAP refused {where}: it is {str(p.dtype).removeprefix('torch.')}, and "
                        "SOAP preconditions parameters of a floating dtype only"
                    )
                check_writable(p, where)
                check_soap_gradient(p.grad, where)
                check_lr_fits(hyper["lr"], p, where)
                work.append((p, hyper, where))
        # One host sync for all gradients, and one for all new values below: a check per
        # parameter would stall a GPU once per parameter and step.
        if work:
            finite = torch.stack([torch.isfinite(p.grad).all() for p, _, _ in work]).tolist()
            for (_, _, where), ok in zip(work, finite, strict=True):
                if not ok:
                    raise ValueError(f"gradient of {where} has NaN or inf")
        updates = [(p, hyper, *self._compute_step(p, hyper, where)) for p, hyper, where in work]
        if updates:
            flags = torch.stack([u[2]["_finite"] for u in updates]).tolist()
            for (p, hyper, new_state, _), row in zip(updates, flags, strict=True):
                bad = [key for key, ok in zip(_CHECKED, row, strict=True) if not ok]
                if bad:
                    where = new_state["_where"]
                    refuse_non_finite(new_state, bad, p.grad, where, self.dtype, hyper["eps"])
        for p, _, new_state, diag in updates:
            p.copy_(new_state.pop("param"))
            for key in ("_finite", "_where", "_param", "update"):
                del new_state[key]
            self.state[p].update(new_state)
            if self.track_diagnostics:
                self.diagnostics[p] = diag

    def _compute_step(
        self, p: torch.Tensor, group: dict[str, Any], where: str
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """One parameter's new state (its new value under ``"param"``) and diagnostics.

        Reads ``self.state[p]`` and ``p`` but writes neither; raises before the commit if
        anything it produced is not finite.
        """
        grad = p.grad.detach().to(self.dtype, copy=True)
        state = dict(self.state[p]) or self._init_state(p)
        t = state["step"] + 1  # 1-based, for the bias corrections
        beta = group["shampoo_beta"]
        if self.correct_shampoo_beta_bias:
            # EMA with bias correction: at t = 1 the factor is the first update itself.
            beta = 1.0 - (1.0 - beta) / (1.0 - beta**t)
        diag: dict[str, Any] = {}

        with matmul_precision(self.fp32_matmul_prec):
            state["L"], state["R"] = self._update_factors(state, grad, beta, group["eps"], diag)
        try:
            with matmul_precision(self.qr_fp32_matmul_prec):
                self._refresh_basis(state, eigh_now=self.use_eigh or state["step"] == 0)
        except (torch.linalg.LinAlgError, RuntimeError):
            # eigh fails on an overflowed factor with an unhelpful LinAlgError; say why.
            bad = [key for key in _CHECKED[:2] if not bool(torch.isfinite(state[key]).all())]
            if bad:
                refuse_non_finite(state, bad, grad, where, self.dtype)
            raise
        decay = self._decay_factor(p, grad, group)
        Q_L, Q_R = state["Q_L"], state["Q_R"]
        with matmul_precision(self.fp32_matmul_prec):
            g_rot = Q_L.T @ grad @ Q_R
        direction = self._adam_direction(state, g_rot, group, t)
        with matmul_precision(self.fp32_matmul_prec):
            update = Q_L @ direction @ Q_R.T
        if self.max_update_rms > 0:
            rms = update.square().mean().sqrt()
            update.mul_((self.max_update_rms / (rms + 1e-7)).clamp(max=1.0))
        state["update"] = update
        state["param"] = new_parameter(p, decay, group["lr"], update)
        state["_param"] = {
            "decay": decay,
            "lr": group["lr"],
            "weight_decay": group["weight_decay"],
            "dtype": p.dtype,
        }
        # Checked by step() for all parameters at once, before anything is committed.
        state["_finite"] = torch.stack([torch.isfinite(state[key]).all() for key in _CHECKED]).to(
            update.device
        )
        state["_where"] = where
        state["step"] = t
        return state, diag


class REKLS(SOAP):
    """REKLS: SOAP with KL-Shampoo factor updates and an ``eigh`` basis refresh every step.

    "Realtime eigen" KL-SOAP: the basis is recomputed exactly from the factors that already
    include the current gradient. Equivalent to ``SOAP(..., use_eigh=True,
    use_kl_shampoo=True)``; every other keyword of :class:`SOAP` is accepted (the library's
    0.3.0 REKLS does not expose ``fp32_matmul_prec``, so there it is always ``'high'``).

    Args:
        params: Parameters (all 2-D) or parameter groups.
        lr: Learning rate.
        betas: Adam's (β₁, β₂).
        shampoo_beta: EMA coefficient of the Kronecker factors.
        eps: Adam's ε and the KL-Shampoo eigenvalue floor.
        weight_decay: Weight decay coefficient.
        **kwargs: Any other keyword of :class:`SOAP` except ``use_eigh``/``use_kl_shampoo``.

    Raises:
        TypeError: if ``use_eigh`` or ``use_kl_shampoo`` is passed, plus :class:`SOAP`'s errors.

    Example:
        >>> import torch
        >>> w = torch.nn.Parameter(torch.zeros(4, 3))
        >>> opt = REKLS([w], lr=0.1, fp32_matmul_prec="highest")
        >>> opt.use_eigh, opt.use_kl_shampoo
        (True, True)
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor] | Iterable[dict[str, Any]],
        lr: float,
        betas: tuple[float, float] = (0.9, 0.95),
        shampoo_beta: float = 0.95,
        eps: float = 1e-8,
        weight_decay: float = 0.01,
        **kwargs: Any,
    ) -> None:
        for fixed in ("use_eigh", "use_kl_shampoo"):
            if fixed in kwargs:
                raise TypeError(f"REKLS fixes {fixed}=True; use SOAP to choose it")
        super().__init__(
            params,
            lr,
            betas,
            shampoo_beta,
            eps,
            weight_decay,
            use_eigh=True,
            use_kl_shampoo=True,
            **kwargs,
        )


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
        TypeError: if β is not a real number or ``t`` not an int (bools are neither).
        ValueError: if β or t is out of range.

    Example:
        >>> ema_first_weight(0.5, 1)
        1.0
    """
    shampoo_beta = check_real("shampoo_beta", shampoo_beta, low=0.0, high=1.0, high_open=True)
    t = check_int("t", t, low=1)
    if shampoo_beta == 0:
        return 1.0 if t == 1 else 0.0
    return (1 - shampoo_beta) * shampoo_beta ** (t - 1) / (1 - shampoo_beta**t)
