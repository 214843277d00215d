"""Which product sites move a block's outputs, each site alone in TF32: the attribution.

:func:`tf32_attribution` runs a block once in float32, once with every float32 product in
TF32, and once per product site with that site alone in TF32 (the sites of
:func:`eigprec.audit.tf32_audit`), and reports how far each moves the block's outputs.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from eigprec._tables import markdown_table
from eigprec.audit.mode import AttributionMode, Settings
from eigprec.audit.modules import module_paths
from eigprec.audit.options import check_options
from eigprec.audit.report import AuditRecord, _key
from eigprec.tf32.emulate import TF32EmulationMode
from eigprec.tf32.rounding import check_rounding

__all__ = ["Attribution", "SiteEffect", "tf32_attribution"]


@dataclass(frozen=True)
class SiteEffect:
    """How much one product site's TF32 rounding alone moves the outputs of a block.

    Attributes:
        frames: ``(filename, line, function)`` of the user's frames, innermost first.
        op: ATen operator (``"mm"``, ``"convolution_backward"``...).
        phase: ``"forward"`` or ``"backward (<autograd node>)"``.
        shapes: shapes of the multiplied operands.
        calls: how many times the site ran in one run of the block.
        effects: output name -> ‖y_site − y_fp32‖_F / ‖y_fp32‖_F, where ``y_site`` is the
            output with only this site's products in TF32.
        module: the ``nn.Module`` path of the site, as in :class:`AuditRecord`.

    Example:
        >>> e = SiteEffect((("f.py", 3, "g"),), "mm", "forward", ((2, 2), (2, 1)), 1, {"x": 0.5})
        >>> e.site, e.effect
        ('f.py:3', 0.5)
    """

    frames: tuple[tuple[str, int, str], ...]
    op: str
    phase: str
    shapes: tuple[tuple[int, ...], ...]
    calls: int
    effects: dict[str, float]
    module: str = ""

    site = AuditRecord.site
    where = AuditRecord.where

    @property
    def effect(self) -> float:
        """The largest of :attr:`effects` (NaN counts as largest): what ranks the sites."""
        return max((_key(v) for v in self.effects.values()), default=0.0)


@dataclass(frozen=True)
class Attribution:
    """What :func:`tf32_attribution` found: TF32's effect on each output, and per site.

    Attributes:
        outputs: output name -> ‖y_tf32 − y_fp32‖_F / ‖y_fp32‖_F with every product in TF32.
        sites: one :class:`SiteEffect` per product site, largest effect first.

    Example:
        >>> import torch
        >>> a = torch.tensor([[1.0, 1.0], [1.0, 1.0 + 2**-12]])
        >>> found = tf32_attribution(lambda: a @ torch.tensor([[1.0], [-1.0]]))
        >>> found.outputs["output"], found.sites[0].op
        (1.0, 'mm')
    """

    outputs: dict[str, float]
    sites: list[SiteEffect]

    def to_markdown(self) -> str:
        """The sites as a Markdown table, largest effect first."""
        names = list(self.outputs)
        rows = [
            {
                "site": s.site,
                "op": s.op if s.phase == "forward" else f"{s.op} in {s.phase[10:-1]}",
                "shapes": " × ".join("x".join(map(str, sh)) for sh in s.shapes),
                "calls": str(s.calls),
                **{f"moves {n}": f"{s.effects[n]:.1e}" for n in names},
            }
            for s in self.sites
        ]
        rows.append(
            {"site": "all sites", "op": "", "shapes": "", "calls": ""}
            | {f"moves {n}": f"{self.outputs[n]:.1e}" for n in names}
        )
        return markdown_table(rows)


def tf32_attribution(
    block: Callable[[], Any],
    *,
    rounding: str | None = None,
    skip: tuple[str, ...] = ("torch", "eigprec"),
    depth: int = 1,
) -> Attribution:
    """Which product's TF32 rounding moves your results? An end-to-end A/B, per site.

    A per-product audit (:func:`tf32_audit`) measures each product's own error; it cannot
    see what the rest of the computation makes of it (normal equations square the
    condition number: a tiny error in ``AᵀA`` moves the solution most). This function runs
    ``block`` (a callable without arguments that returns the outputs you care about: a
    tensor, a tuple of tensors or a dict name -> tensor) in float32, then with every
    float32 GEMM and convolution in TF32 (emulated: operands rounded, float32
    accumulation, whatever the settings), then once per product site with only that
    site's products in TF32. Sites are keyed as in the audit (your innermost frame
    outside ``skip``, operator, operand shapes, forward/backward); products inside the
    derivative formulas torch runs without TF32 are left alone.

    ``block`` runs ``3 + number of sites`` times, so it must be deterministic and free of
    side effects (build models, optimizers and data inside it, or copy them); a block whose
    two float32 runs differ (NaN compares equal to NaN), or any of whose runs returns other
    output names or shapes than the first, is refused.

    Args:
        block: the computation; returns the outputs to compare.
        rounding: TF32 rounding (``"rna"``: Ampere cuBLAS; ``"rne"``: the H100 and H200
            measured); None: ``eigprec.tf32.default_rounding()``.
        skip: modules whose frames are not "your code" (as in :func:`tf32_audit`).
        depth: how many of your frames identify a site.

    Returns:
        An :class:`Attribution`: each output's change under full TF32 and each site's
        effect alone, largest first.

    Raises:
        TypeError: if ``block`` is not callable or returns something else than the above.
        ValueError: for an unknown ``rounding``, bad ``skip``/``depth`` (as in
            :func:`tf32_audit`), or a block whose float32 runs disagree or whose runs
            return other names or shapes.

    Example:
        >>> import torch
        >>> g = torch.Generator().manual_seed(0)
        >>> q, _ = torch.linalg.qr(torch.randn(2000, 50, generator=g, dtype=torch.float64))
        >>> a = (q * torch.logspace(0, -1, 50, dtype=torch.float64)).float()  # cond 10
        >>> b = torch.randn(2000, generator=g)
        >>> r = (b - (q @ (q.T @ b.double())).float()).unsqueeze(1)  # Aᵀr = 0
        >>> def normal_equations():
        ...     x = torch.linalg.solve(a.T @ a, a.T @ b)  # Aᵀb: a gemv, never TF32
        ...     check = a.T @ r  # all cancellation: the audit's worst product
        ...     return {"x": x}
        >>> found = tf32_attribution(normal_equations)
        >>> [(s.shapes[1], s.effects["x"] > 1e-5) for s in found.sites]
        [((2000, 50), True), ((2000, 1), False)]
    """
    if not callable(block):
        raise TypeError(f"block must be callable, got {type(block).__name__}")
    _, depth = check_options(rounding, 0, False, skip, depth)
    rounding = check_rounding(rounding)
    settings = Settings(rounding, 0, False, skip, depth)
    # Every float32 product of a selected site in TF32, whatever the switches say.
    emulator = TF32EmulationMode(rounding, force=True, convolutions=True, matmuls=True)

    def run(selected: frozenset | None) -> tuple[dict[str, torch.Tensor], dict[tuple, int]]:
        mode = AttributionMode(settings, selected, emulator)
        with mode, module_paths(settings):
            out = block()
        return _outputs(out), mode.seen

    plain, seen = run(frozenset())
    again, _ = run(frozenset())
    _check_same(plain, again, "float32 results")
    if any(not _equal_nan(plain[k], again[k]) for k in plain):
        raise ValueError(
            "block gave different float32 results on two runs: it must be deterministic"
        )
    full, _ = run(None)
    _check_same(plain, full, "results with every product in TF32")
    sites = []
    for key, calls in seen.items():
        alone, _ = run(frozenset({key}))
        _check_same(plain, alone, "results with one site in TF32")
        frames, op, shapes, phase, module = key
        effect = SiteEffect(frames, op, phase, shapes, calls, _change(alone, plain), module)
        sites.append(effect)
    sites.sort(key=lambda s: -s.effect)
    return Attribution(_change(full, plain), sites)


# --- the block's outputs and their checks ---------------------------------------------


def _outputs(value: Any) -> dict[str, torch.Tensor]:
    if isinstance(value, torch.Tensor):
        value = {"output": value}
    elif isinstance(value, (tuple, list)):
        value = {f"output {i}": v for i, v in enumerate(value)}
    if not isinstance(value, dict) or not value:
        raise TypeError(
            "block must return a tensor, a non-empty tuple/list of tensors or a dict "
            f"name -> tensor, got {type(value).__name__}"
        )
    for name, v in value.items():
        if not isinstance(v, torch.Tensor) or not v.is_floating_point():
            raise TypeError(f"output {name!r} must be a floating-point tensor, got {v!r:.60}")
    return {str(k): v.detach().double() for k, v in value.items()}


def _equal_nan(a: torch.Tensor, b: torch.Tensor) -> bool:
    # Bit for bit but for NaN payloads: a deterministic block may return NaN, and NaN != NaN.
    return a.shape == b.shape and bool(((a == b) | (a.isnan() & b.isnan())).all())


def _check_same(first: dict[str, torch.Tensor], run: dict[str, torch.Tensor], what: str) -> None:
    # Every run of the block must return the same names and shapes: a difference would be
    # broadcast or missed silently by the comparison.
    if list(run) != list(first):
        raise ValueError(
            f"block returned other output names in its {what} ({list(run)}) than in its "
            f"first float32 run ({list(first)}): it must be deterministic"
        )
    for name, value in run.items():
        if value.shape != first[name].shape:
            raise ValueError(
                f"block's output {name!r} changed shape from {tuple(first[name].shape)} to "
                f"{tuple(value.shape)} in its {what}: it must be deterministic"
            )


def _change(new: dict[str, torch.Tensor], old: dict[str, torch.Tensor]) -> dict[str, float]:
    out = {}
    for name, ref in old.items():
        size = float(torch.linalg.vector_norm(ref))
        dist = float(torch.linalg.vector_norm(new[name] - ref))
        out[name] = (0.0 if dist == 0 else math.inf) if size == 0 else dist / size
    return out
