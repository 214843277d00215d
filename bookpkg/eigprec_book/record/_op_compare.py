"""The operator sweep's one measurement: a call under each TF32 switch, compared (private).

Shared by :mod:`eigprec_book.record.ops` (the sized probes and op_db's samples) and
:mod:`eigprec_book.record.complex64`.
"""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import Tensor
from torch.utils._pytree import tree_leaves

from eigprec.precision import _restore, _snapshot

__all__ = ["ROUNDS", "SETTINGS", "Call", "compare", "switches"]

#: setting -> (matmul TF32 switch, cuDNN TF32 switch)
SETTINGS: dict[str, tuple[bool, bool]] = {
    "off": (False, False),
    "matmul": (True, False),
    "cudnn": (False, True),
}

#: Runs of each setting, interleaved across the settings (see :func:`compare`).
ROUNDS = 3

Call = Callable[[], Any]


@contextlib.contextmanager
def switches(matmul: bool, cudnn: bool) -> Iterator[None]:
    # cuDNN's switch through its flags() context: torch's test helpers (op_db) lock the
    # plain attribute (torch.backends.cudnn.disable_global_flags). The matmul switch is
    # restored with every precision attribute it rewrites (fp32_precision among them).
    old = _snapshot()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.backends.cuda.matmul.allow_tf32 = matmul
    try:
        with torch.backends.cudnn.flags(
            enabled=torch.backends.cudnn.enabled,
            benchmark=False,
            deterministic=False,
            allow_tf32=cudnn,
        ):
            yield
    finally:
        _restore(old)


def _floats(out: Any) -> list[Tensor]:
    leaves = [x for x in tree_leaves(out) if isinstance(x, Tensor)]
    return [
        x.detach().to("cpu", torch.float64) if x.is_floating_point() else x.cpu() for x in leaves
    ]


def _same(a: list[Tensor], b: list[Tensor]) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        if x.layout != torch.strided:
            x, y = x.to_dense(), y.to_dense()
        if x.shape != y.shape or x.dtype != y.dtype:
            return False
        if not bool(((x == y) | (x.isnan() & y.isnan())).all()):
            return False
    return True


def _rel(a: list[Tensor], b: list[Tensor]) -> float | None:
    """‖a − b‖/‖b‖ over the floating leaves (finite entries of b), or None if not comparable."""
    num = den = 0.0
    seen = False
    for x, y in zip(a, b, strict=False):
        if x.layout != torch.strided:
            x, y = x.to_dense(), y.to_dense()
        if not (x.is_floating_point() and y.is_floating_point()) or x.shape != y.shape:
            continue
        keep = torch.isfinite(x) & torch.isfinite(y)
        num += float(((x - y)[keep] ** 2).sum())
        den += float((y[keep] ** 2).sum())
        seen = True
    if not seen:
        return None
    return math.sqrt(num / den) if den > 0 else (0.0 if num == 0 else math.inf)


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def compare(call: Call, reference: Call | None, device: str) -> dict[str, Any]:
    """Run ``call`` under each setting :data:`ROUNDS` times, the settings interleaved, and
    compare (the recorder's one measurement).

    Args:
        call: a float32 computation on ``device``.
        reference: the same computation in float64, or None.
        device: where it runs (``"cuda"`` or ``"cpu"``).

    Returns:
        ``{"repeatable": {setting: bool}, "change": {setting: float|None},
        "changed": [settings], "error": {setting or "noise": float|None}}``; ``change`` of
        ``off`` is its run-to-run difference (0 when repeatable).

    Example:
        >>> r = compare(lambda: torch.ones(3) @ torch.ones(3), None, "cpu")
        >>> r["changed"], r["repeatable"]["off"]
        ([], True)
    """
    # Rounds across the settings (off, matmul, cudnn, off, ...), not each setting's runs
    # together: an operator with a few run-to-run outcomes (LAPACK's lstsq on an AMD EPYC at
    # n <= 16) then shows its noise within a setting instead of passing for a change.
    runs: dict[str, list[list[Tensor]]] = {name: [] for name in SETTINGS}
    for _ in range(ROUNDS):
        for name, (mm, cd) in SETTINGS.items():
            with switches(mm, cd):
                torch.manual_seed(0)
                out = call()
                _sync(device)
            runs[name].append(_floats(out))
    ref = None
    if reference is not None:
        with switches(False, False):
            torch.manual_seed(0)
            try:
                ref = _floats(reference())
            except Exception:  # (an operator without float64 on this device)
                ref = None
    base = runs["off"][0]
    repeatable = {name: all(_same(r[0], x) for x in r[1:]) for name, r in runs.items()}
    change = {name: _rel(r[0], base) for name, r in runs.items()}
    noise = [v for v in (_rel(x, base) for x in runs["off"][1:]) if v is not None]
    change["off"] = max(noise) if noise else None
    changed = [
        name
        for name in ("matmul", "cudnn")
        if repeatable[name] and repeatable["off"] and not _same(runs[name][0], base)
    ]
    error = {name: (_rel(r[0], ref) if ref is not None else None) for name, r in runs.items()}
    return {"repeatable": repeatable, "change": change, "changed": changed, "error": error}
