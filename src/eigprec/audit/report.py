"""Which of your float32 products would TF32 hurt? An audit, per line of your code.

Inside ``with tf32_audit() as report:`` every float32 product that a TF32 GPU would run in
TF32 -- the GEMMs behind ``@``, ``mm``, ``bmm``, ``addmm``, ``baddbmm``, ``addbmm``,
``matmul``, ``einsum``, ``linear`` and the convolutions behind ``conv1d/2d/3d`` and their
transposes, in forward and in autograd's backward -- is run as your code asked, and also,
on the side, with TF32 operands and against a reference. Each call site of your code
(file and line of the innermost frame outside ``torch`` and ``eigprec``) gets one
:class:`AuditRecord` per operator and operand shapes: how often it ran and the worst TF32
error it showed. Matrix-vector and vector-vector products (``mv``, ``addmv``, ``dot``) are
not audited: PyTorch runs them without TF32; nor are ``vector @ matrix`` and ``F.linear`` of a
1-D input, one-row GEMMs that the measured H100 and H200 ran in float32 at 'high'.
Eigenvalues and singular values without vectors (``eigvalsh``, ``svdvals``...), which a
dispatch mode would send down ATen's vector path, run exactly as without the audit.

How the TF32 result is obtained:

* without TF32 hardware (the CPU, older GPUs): the operands are rounded to TF32 with
  :func:`eigprec.tf32.round_tf32` (``rounding="rna"``, as Ampere's cuBLAS) and the product
  is accumulated in float32, which is exactly what a TF32 tensor core computes;
* on a TF32 GPU: the product as cuBLAS/cuDNN runs it with TF32 on, and at full float32
  ('highest'); whichever matches the current setting is your own result. The other one
  needs the process-wide switch flipped: each audited product then holds the precision
  alone, as a :func:`~eigprec.matmul_precision` block of its own would (other threads'
  blocks wait until it is done, and it waits for theirs), and the switch is restored
  exactly (``'none'`` included).

The reference is the product in float64 when it costs at most ``float64_limit``
multiply-adds, else the float32 product (accurate enough to measure TF32's error, which is
about 2**13 times larger).

Errors, worst over the calls of a site:

* ``norm_error`` = ‖C_tf32 − C_ref‖_F / ‖C_ref‖_F: TF32's error at the scale of the
  result. Of the order of 2**-12 for random-sign operands whatever k; large when C
  cancels, i.e. when C is much smaller than the operands that built it.
* ``entry_error`` = ``max_ij |C_tf32 − C_ref|_ij / max(|C_ref|_ij, f)``, with the floor
  ``f = 2**-24 · max|C_ref|`` (entries float32 itself cannot resolve at the result's scale
  are measured against that resolution): the relative error of the entry TF32 hurts most.
  Large for small entries that matter (small eigenvalues, residuals) and for entries that
  are merely near zero and do not matter -- only you can tell which.
* ``scaled_entry_error``: the same entry errors against ``‖A_i,:‖‖B_:,j‖`` (GEMMs only),
  about 2**-12 wherever TF32 did its ordinary rounding; the tables' "row·col" column. Where
  the other two are far larger, the product cancels.

Non-finite entries of the reference are left out of both measures. A TF32 result with inf or
NaN where the float32 result is finite (an operand just below float32's largest value rounds
up to 2**128) is flagged: both errors read ``inf`` and ``tf32_nonfinite`` counts the call.

Products inside the derivative formulas torch runs with TF32 off (``at::NoTF32Guard``: the
backwards of ``eigh``, ``svd``, ``cholesky``, ``pinv``, ``qr``, ``det``, ``solve``, ``lu``,
triangular and Cholesky solves...) are not reported: a TF32 GPU runs them in float32. (The
forward-mode formulas guarded the same way are still reported; :func:`~eigprec.emulate_tf32`
marks them. The audit's own function mode steps aside while a transformer module runs, whose
fast path torch takes only without one.) ``cdist``'s
matrix-product path is rebuilt bit for bit and audited. Operators whose own kernel
multiplies out of the dispatcher's sight -- fused attention (forward and backward), the
fused transformer fast path, oneDNN/cuDNN RNN kernels (``nn.LSTM`` on the CPU),
``_trilinear`` (``nn.Bilinear``), float32 solves, inverses and LU factorisations (on a GPU
blocked algorithms with TF32 GEMM updates: ~1e-4 on an H200) -- are *run but not covered*:
:attr:`AuditReport.not_covered` lists each with what a TF32 GPU does for it, and so do the
tables. ``torch.compile``d code compiles nothing while the audit runs (Dynamo steps aside
while a dispatch mode is active): it runs eagerly, and its products are audited as eager
ones -- what Inductor's kernels would do with TF32 (they choose their own) is not measured.
Not seen at all: products in threads other than the one that opened the audit (autograd's
own threads excepted); sparse and nested tensors (passed through untouched) and
non-float32 products. A backward product whose autograd node was not created
by an audited forward product (a graph built before the audit, or the backward of a
non-product such as ``linalg.solve``) is attributed to the frames at backward time, i.e. the
``.backward()`` line. Inside an :func:`~eigprec.emulate_tf32` block opened *within* the
audit, products reach the audit with operands already rounded (their TF32 error reads zero);
open the audit inside the emulator instead (there the float32 and reference results come
from a clean run, so the errors read as outside it).


Example:
    >>> import torch
    >>> w = torch.randn(8, 4, generator=torch.Generator().manual_seed(0), requires_grad=True)
    >>> with tf32_audit() as report:
    ...     (torch.ones(3, 8) @ w).sum().backward()
    >>> [(r.op, r.phase, r.norm_error > 0) for r in report.records]  # w's gradient is exact
    [('mm', 'forward', True), ('mm[mat2 grad]', 'backward (MmBackward0)', False)]
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from eigprec._args import check_int
from eigprec._context import reusable
from eigprec._tables import markdown_table
from eigprec.audit.measures import ENTRY_FLOOR
from eigprec.audit.mode import AuditMode, Settings
from eigprec.audit.modules import module_paths
from eigprec.audit.options import check_audit_args, check_options, check_sample
from eigprec.audit.rows import record_rows
from eigprec.audit.verdict import summary
from eigprec.tf32.gpus import profile
from eigprec.tf32.plain import PlainCalls
from eigprec.tf32.rounding import check_rounding

__all__ = ["ENTRY_FLOOR", "RANKINGS", "AuditRecord", "AuditReport", "tf32_audit"]

#: What :meth:`AuditReport.ranked` can sort by (worst first).
RANKINGS = ("norm", "entry")


@dataclass(frozen=True)
class AuditRecord:
    """What the audit saw at one call site, for one operator and operand shapes.

    Attributes:
        frames: ``(filename, line, function)`` of the user's frames, innermost first
            (``depth`` of them); for a backward product, the forward call that made it.
        op: ATen operator (``"mm"``, ``"addmm"``, ``"convolution"``,
            ``"convolution_backward[weight]"``...).
        phase: ``"forward"`` or ``"backward (<autograd node>)"``.
        shapes: shapes of the multiplied operands.
        calls: how many times it ran.
        tf32_calls: of those, how many ran while the settings asked for TF32 (what a TF32
            GPU would have done with them).
        norm_error: worst ‖C_tf32 − C_ref‖_F / ‖C_ref‖_F.
        entry_error: worst ``max_ij |C_tf32 − C_ref|_ij / max(|C_ref|_ij, floor)``.
        fp32_norm_error: worst norm-wise error of plain float32 against float64, for
            comparison; ``None`` when no call was within the float64 limit.
        float64_calls: calls measured against a float64 reference (the rest: float32).
        scaled_entry_error: worst ``|C_tf32 − C_ref|_ij / (‖A_i,:‖₂ ‖B_:,j‖₂)`` -- each
            entry's error against the largest value its row and column could give, which
            does not alarm on entries near zero by cancellation (about 2**-12 for any
            benign GEMM); ``None`` for convolutions.
        module: path of the innermost ``nn.Module`` running the product, relative to the
            outermost one called (``"TransformerEncoder"``, ``"layers.0.linear1"``...);
            ``""`` outside modules. Tells apart the layers behind one line of your code.
        tf32_nonfinite: calls whose TF32 result held inf/NaN where float32's was finite
            (TF32 rounds operands just below float32's largest value up to 2**128); their
            errors count as infinite, never as 0.
        measured_calls: of the calls, how many were measured (all of them unless the
            audit samples, ``tf32_audit(sample=k)``); the errors are the worst of those.

    Example:
        >>> import torch
        >>> with tf32_audit() as report:
        ...     _ = torch.tensor([[1 + 2**-12]]) @ torch.ones(1, 1)  # TF32 keeps 1
        >>> r = report.records[0]
        >>> r.op, r.calls, r.norm_error == 2**-12 / (1 + 2**-12)
        ('mm', 1, True)
    """

    frames: tuple[tuple[str, int, str], ...]
    op: str
    phase: str
    shapes: tuple[tuple[int, ...], ...]
    calls: int
    tf32_calls: int
    norm_error: float
    entry_error: float
    fp32_norm_error: float | None
    float64_calls: int
    tf32_nonfinite: int = 0
    module: str = ""
    scaled_entry_error: float | None = None
    measured_calls: int | None = None  # None: not recorded (every call)

    @property
    def site(self) -> str:
        """``file:line`` of the innermost user frame (``"?"`` if none was found)."""
        if not self.frames:
            return "?"
        filename, line, _ = self.frames[0]
        return f"{os.path.basename(filename)}:{line}"

    @property
    def where(self) -> str:
        """All recorded frames, ``file:line (function)``, innermost first, joined by ``←``."""
        return " ← ".join(f"{os.path.basename(f)}:{n} ({fn})" for f, n, fn in self.frames) or "?"


class AuditReport:
    """The records of one :func:`tf32_audit` block, ranked by harm.

    Filled while the block runs; read it after. ``report.records`` is ranked by
    ``norm_error`` (then ``entry_error``), worst first; :meth:`ranked` sorts by either.
    ``str(report)`` is a plain-text table, :meth:`to_markdown` a Markdown one.

    Example:
        >>> import torch
        >>> with tf32_audit() as report:
        ...     _ = torch.ones(2, 3) @ torch.ones(3, 2)  # exact in TF32
        >>> print(report.to_markdown().splitlines()[0].split(" | ")[4:9])
        ['TF32 on', 'verdict', 'TF32 err. (norm)', 'TF32 err. (row·col)', 'TF32 err. (entry)']
        >>> report.records[0].norm_error, report.verdict()[:22]
        (0.0, 'Verdict: all 1 sites w')
    """

    def __init__(self, settings: Any) -> None:
        # settings: the private eigprec.audit.mode.Settings the audit ran with
        self._settings = settings

    def ranked(self, by: str = "norm") -> list[AuditRecord]:
        """The records, worst first.

        Args:
            by: ``"norm"`` (``norm_error``, ties by ``entry_error``) or ``"entry"``
                (``entry_error``, ties by ``norm_error``). NaN ranks first.

        Returns:
            A new list of :class:`AuditRecord`.

        Raises:
            ValueError: if ``by`` is not one of ``RANKINGS`` (``"norm"``, ``"entry"``).
        """
        if by not in RANKINGS:
            raise ValueError(f"by must be one of {RANKINGS}, got {by!r}")
        with self._settings.lock:
            items = list(self._settings.sites.items())
        records = [
            AuditRecord(
                frames=key[0],
                module=key[4],
                op=key[1],
                shapes=key[2],
                phase=key[3],
                calls=s.calls,
                tf32_calls=s.tf32_calls,
                norm_error=s.norm_error,
                entry_error=s.entry_error,
                fp32_norm_error=s.fp32_norm_error,
                float64_calls=s.float64_calls,
                tf32_nonfinite=s.tf32_nonfinite,
                scaled_entry_error=s.scaled_entry_error,
                measured_calls=s.measured,
            )
            for key, s in items
        ]

        def harm(r: AuditRecord) -> tuple[float, float]:
            first, second = (
                (r.norm_error, r.entry_error) if by == "norm" else (r.entry_error, r.norm_error)
            )
            return (-_key(first), -_key(second))

        return sorted(records, key=harm)

    @property
    def records(self) -> list[AuditRecord]:
        """The records ranked by ``norm_error``, worst first."""
        return self.ranked("norm")

    @property
    def not_covered(self) -> dict[str, tuple[int, str]]:
        """Operators that ran float32 products the audit could not see.

        ATen operator name -> (calls, what a TF32 GPU does for it): fused attention, the
        fused transformer fast path, oneDNN's/cuDNN's fused RNNs, ``_trilinear``
        (``nn.Bilinear``), and complex64 GEMMs (``"mm[complex64]"``...: not measured on a
        GPU yet). Listed under the tables, never silently skipped.
        """
        with self._settings.lock:
            return {k: (v[0], v[1]) for k, v in self._settings.not_covered.items()}

    def _not_covered_lines(self) -> list[str]:
        return [
            f"Run but not covered: aten.{name} ({calls} calls) -- {note}."
            for name, (calls, note) in self.not_covered.items()
        ]

    def __len__(self) -> int:
        return len(self._settings.sites)

    def verdict(self) -> str:
        """One line: all sites within ordinary TF32 rounding, or how many lose more.

        Ordinary TF32 rounding gives a norm-wise error of about 2**-12 and at most
        ``2**-10`` (``eigprec.audit.verdict.ordinary_bound``) for a product whose terms
        do not cancel; the tables' verdict column says which sites exceed it and why
        (``eigprec.audit.verdict``).
        """
        return summary(self.records, self._settings.rounding)

    def rows(self, by: str = "norm", limit: int | None = None) -> list[dict[str, str]]:
        """The ranked records as rows of formatted strings, the columns of the tables.

        Args:
            by: ranking, as in :meth:`ranked`.
            limit: keep only the first ``limit`` rows (``None``: all).

        Returns:
            A list with one dict per record — site, op (a backward product names its autograd
            node), shapes, calls, whether the settings asked for TF32 there ("TF32 on"), the
            verdict (``eigprec.audit.verdict``), TF32 error norm-wise, at the worst entry
            against its row·column scale (``scaled_entry_error``: near 2**-12 where TF32 did
            nothing unusual, however much the product cancels) and against its own size,
            float32 error norm-wise, and, when any listed record has one, the count of calls
            where TF32 gave inf/NaN and float32 did not.

        Raises:
            TypeError: for a ``limit`` that is not an int (bools refused).
            ValueError: for a bad ``by`` or a negative ``limit``.
        """
        limit = None if limit is None else check_int("limit", limit, low=0)
        return record_rows(self.ranked(by)[:limit], self._settings.depth, self._settings.rounding)

    def to_markdown(self, by: str = "norm", limit: int | None = None) -> str:
        """The ranked records as a Markdown table.

        Args:
            by: ranking, as in :meth:`ranked`.
            limit: keep only the first ``limit`` rows.

        Returns:
            The table; a one-line note if nothing was audited.

        Raises:
            ValueError: for a bad ``by`` or ``limit``.
        """
        rows = self.rows(by, limit)
        extra = self._not_covered_lines()
        table = (
            markdown_table(rows)
            if rows
            else "*No float32 matrix product or convolution was audited*"
        )
        return "\n\n".join([table, *(f"*{line}*" for line in extra)])

    def to_text(self, by: str = "norm", limit: int | None = None) -> str:
        """The ranked records as a fixed-width plain-text table (what ``str()`` gives)."""
        rows = self.rows(by, limit)
        extra = self._not_covered_lines()
        if not rows:
            return "\n".join(["No float32 matrix product or convolution was audited", *extra])
        header = list(rows[0])
        widths = [max(len(h), *(len(row[h]) for row in rows)) for h in header]
        lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))]
        lines += [
            "  ".join(row[h].ljust(w) for h, w in zip(header, widths, strict=True)) for row in rows
        ]
        return "\n".join([*(line.rstrip() for line in lines), *extra])

    def __str__(self) -> str:
        return self.to_text()

    def __repr__(self) -> str:
        return f"AuditReport({len(self)} records)"


def _key(x: float) -> float:
    return math.inf if math.isnan(x) else x


@reusable(check=check_audit_args)
def tf32_audit(
    *,
    rounding: str | None = None,
    float64_limit: int = 2**18,
    only_enabled: bool = False,
    skip: tuple[str, ...] = ("torch", "eigprec"),
    depth: int = 1,
    gpu: str | None = None,
    sample: int | None = None,
) -> Iterator[AuditReport]:
    """Measure, per call site, what TF32 would do to each float32 product of a code block.

    Your code runs exactly as without the audit (same operators on the same inputs, same
    results, bit for bit); each float32 GEMM or convolution is, in addition, re-run with
    TF32 operands and against a reference (see the module docstring), forward and backward,
    under ``no_grad`` and ``inference_mode`` alike. Backward products are attributed to
    the forward call whose autograd node ran them when that call ran inside the audit.
    Every torch setting is left as found.

    Args:
        rounding: TF32 rounding where TF32 is emulated (``"rna"``: Ampere cuBLAS;
            ``"rne"``: the H100 and H200 measured); None:
            ``eigprec.tf32.default_rounding()``.
        float64_limit: largest cost (multiply-adds of one call) measured against a float64
            reference; larger calls use float32. ``0`` never uses float64.
        only_enabled: audit only the products that the current settings would run in TF32
            on a TF32 GPU (``torch.backends.cuda.matmul``/``cudnn.conv`` precision); by
            default every float32 product is audited, answering "what if TF32 were on?".
        skip: modules whose frames are not "your code" when attributing a call site (a
            frame is skipped when its module is one of these or inside one). Pass
            ``("torch",)`` to see lines inside ``eigprec`` itself.
        depth: how many of your frames identify a site (2 separates the callers of a
            helper that does the product).
        gpu: the GPU to model, as in :func:`~eigprec.emulate_tf32`: ``"hopper"`` leaves out
            the small products the book's H200 kept in float32 and rounds ties to even
            (unless ``rounding`` says otherwise); None audits every float32 product.
        sample: None measures every call. ``k`` measures each site's first ``k`` calls and
            then every ``k``-th (calls are still counted, and ``measured_calls`` says how
            many were measured): a long training run then pays the side products on one
            step in ``k``, while every site's first steps are measured in full.

    Yields:
        An :class:`AuditReport`, filled as the block runs.

    Raises:
        ValueError: for an unknown ``rounding`` or ``gpu``, a negative ``float64_limit``,
            or a ``depth`` or ``sample`` below 1.
        TypeError: for arguments of the wrong type (NumPy integers count as ints, bools
            do not). Both are raised where ``tf32_audit(...)`` is called.

    Example:
        >>> import torch
        >>> a = torch.tensor([[1.0, 1.0], [1.0, 1.0 + 2**-12]])
        >>> b = torch.tensor([[1.0], [-1.0]])
        >>> with tf32_audit() as report:
        ...     c = a @ b  # (0, -2**-12): all of it lost to TF32's rounding of a
        >>> c.flatten().tolist(), [(r.op, r.calls, r.norm_error) for r in report.records]
        ([0.0, -0.000244140625], [('mm', 1, 1.0)])
    """
    float64_limit, depth = check_options(rounding, float64_limit, only_enabled, skip, depth)
    sample = check_sample(sample)
    model = profile(gpu)
    rounding = check_rounding(model.rounding if rounding is None and model else rounding)
    settings = Settings(
        rounding, float64_limit, only_enabled, skip, depth, gpu=model, sample=sample
    )
    plain = PlainCalls()
    with AuditMode(settings), plain, module_paths(settings, plain):
        yield AuditReport(settings)
