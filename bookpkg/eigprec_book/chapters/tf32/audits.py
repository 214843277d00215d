"""The TF32 chapter's three audits: which products of real code would TF32 hurt?

Each function runs one piece of code under :func:`eigprec.tf32_audit` and returns the
report: the chapter's ``diag(QᵀLQ)``, one step of a KL-Shampoo/SOAP optimizer (REKLS),
and one training step of a small MLP.
"""

from __future__ import annotations

import os

import torch

from eigprec.audit import AuditReport, tf32_audit
from eigprec.soap import REKLS
from eigprec_book.chapters.tf32.experiments import build_qtlq_problem

__all__ = [
    "audit_autocast_step",
    "audit_diag_qtlq",
    "audit_mlp_step",
    "audit_rows",
    "audit_soap_step",
]


def audit_diag_qtlq(n: int = 128, seed: int = 0) -> AuditReport:
    """Audit ``diag(QᵀLQ)`` of the chapter's problem (:func:`build_qtlq_problem`).

    Args:
        n: matrix size.
        seed: seed of the generator that draws Q.

    Returns:
        The :class:`~eigprec.audit.AuditReport` of the one product ``Qᵀ @ L``.

    Example:
        >>> report = audit_diag_qtlq(n=16)
        >>> [r.op for r in report.records]
        ['mm']
    """
    big_l, q, _ = build_qtlq_problem(n=n, seed=seed)
    # [show:audit]
    with tf32_audit(float64_limit=n**3, skip=("torch",)) as report:
        ((q.T @ big_l) * q.T).sum(-1)  # diag(QᵀLQ)
    # [/show:audit]
    return report


def audit_soap_step(
    rows: int = 64, cols: int = 32, batch: int = 256, warmup: int = 3, seed: int = 0
) -> AuditReport:
    """Audit one REKLS (KL-Shampoo factors, SOAP update) step on a linear least-squares layer.

    The optimizer first takes ``warmup`` unaudited steps so that its factors and eigenbases
    are those of a run in progress; then one forward, backward and ``step`` is audited, with
    the sites named inside :mod:`eigprec.soap` (``skip=("torch",)``, three frames deep: a
    product, the core function that makes it, and the optimizer's stage that calls that).

    Args:
        rows: output size of the layer's weight.
        cols: input size of the layer's weight.
        batch: rows of the random input.
        warmup: optimizer steps before the audited one.
        seed: generator seed of the weight and the input.

    Returns:
        The :class:`~eigprec.audit.AuditReport` of the audited step.

    Example:
        >>> report = audit_soap_step(rows=8, cols=4, batch=16, warmup=1)
        >>> len(report) > 0
        True
    """
    gen = torch.Generator().manual_seed(seed)
    w = torch.nn.Parameter(torch.randn(rows, cols, generator=gen))
    x = torch.randn(batch, cols, generator=gen)
    opt = REKLS([w], lr=1e-3)

    def loss() -> torch.Tensor:
        return (x @ w.T).square().mean()

    for _ in range(warmup):
        opt.zero_grad()
        loss().backward()
        opt.step()
    opt.zero_grad()
    with tf32_audit(skip=("torch",), depth=3) as report:
        loss().backward()
        opt.step()
    return report


def _mlp_problem(
    inputs: int, hidden: int, classes: int, batch: int, seed: int
) -> tuple[torch.nn.Module, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    first, second = torch.nn.Linear(inputs, hidden), torch.nn.Linear(hidden, classes)
    with torch.no_grad():
        for layer in (first, second):
            bound = layer.in_features**-0.5
            layer.weight.uniform_(-bound, bound, generator=gen)
            layer.bias.uniform_(-bound, bound, generator=gen)
    mlp = torch.nn.Sequential(first, torch.nn.GELU(), second)
    x = torch.randn(batch, inputs, generator=gen)
    y = torch.randint(0, classes, (batch,), generator=gen)
    return mlp, x, y


def audit_mlp_step(
    inputs: int = 64, hidden: int = 256, classes: int = 10, batch: int = 512, seed: int = 0
) -> AuditReport:
    """Audit one training step (forward, backward, AdamW) of a two-layer GELU MLP.

    Args:
        inputs: input features.
        hidden: hidden width.
        classes: output classes (cross-entropy loss).
        batch: batch size.
        seed: seed of the initialisation and of the random data.

    Returns:
        The :class:`~eigprec.audit.AuditReport` of the step (the backward products are
        attributed to the forward line that made them).

    Example:
        >>> report = audit_mlp_step(inputs=8, hidden=16, batch=32)
        >>> max(r.norm_error for r in report.records) < 2**-9
        True
    """
    mlp, x, y = _mlp_problem(inputs, hidden, classes, batch, seed)
    opt = torch.optim.AdamW(mlp.parameters(), lr=1e-3)
    with tf32_audit(skip=("torch",)) as report:
        logits = mlp(x)
        torch.nn.functional.cross_entropy(logits, y).backward()
        opt.step()
    return report


def audit_autocast_step(
    inputs: int = 64, hidden: int = 256, classes: int = 10, batch: int = 512, seed: int = 0
) -> AuditReport:
    """The MLP step of :func:`audit_mlp_step`, forward under bf16 ``torch.autocast`` (CPU).

    Inside autocast the linear layers run in bf16, so no float32 product is left for TF32.

    Args:
        inputs: input features.
        hidden: hidden width.
        classes: output classes.
        batch: batch size.
        seed: seed of the initialisation and of the random data.

    Returns:
        The :class:`~eigprec.audit.AuditReport` of the forward and backward pass.

    Example:
        >>> len(audit_autocast_step(inputs=8, hidden=16, batch=32))
        0
    """
    mlp, x, y = _mlp_problem(inputs, hidden, classes, batch, seed)
    with tf32_audit(skip=("torch",)) as report:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = mlp(x)
        torch.nn.functional.cross_entropy(logits.float(), y).backward()
    return report


def audit_rows(
    report: AuditReport, limit: int | None = None, helpers: tuple[str, ...] = ("_mm",)
) -> list[dict[str, str]]:
    """A report's ranked records as narrow table rows: site, product, calls and errors.

    Args:
        report: an :class:`~eigprec.audit.AuditReport`.
        limit: keep the first ``limit`` rows (``None``: all).
        helpers: functions that only perform a product for their caller: a site inside one
            is named by its caller's frame (when the report recorded it).

    Returns:
        One dict per record with keys ``site`` (``file:line function``), ``product`` (op
        and shapes; a backward product is marked ``∂``), ``calls``, ``norm``, ``entry``
        and ``scaled`` (TF32 errors: norm-wise, worst entry against its own size, and
        worst entry against ``‖A_i,:‖‖B_:,j‖``, the largest value its row and column
        could give; ``–`` where the audit has none, e.g. convolutions).

    Example:
        >>> rows = audit_rows(audit_diag_qtlq(n=16))
        >>> sorted(rows[0])
        ['calls', 'entry', 'norm', 'product', 'scaled', 'site']
    """
    rows = []
    for r in report.ranked("norm")[:limit]:
        frames = [f for f in r.frames if f[2] not in helpers] or list(r.frames)
        site = "?"
        if frames:
            filename, line, function = frames[0]
            site = f"{os.path.basename(filename)}:{line} {function}"
        shapes = "·".join("×".join(map(str, shape)) for shape in r.shapes)
        mark = "" if r.phase == "forward" else "∂ "
        rows.append(
            {
                "site": site,
                "product": f"{mark}{r.op} {shapes}",
                "calls": str(r.calls),
                "norm": f"{r.norm_error:.1e}",
                "entry": f"{r.entry_error:.1e}",
                "scaled": "–" if r.scaled_entry_error is None else f"{r.scaled_entry_error:.1e}",
            }
        )
    return rows
