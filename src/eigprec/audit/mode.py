"""The dispatch mode behind :func:`eigprec.audit.tf32_audit` (private).

It sits at the level of ATen operators, like :mod:`eigprec.tf32`'s emulator, so it sees the
GEMMs and convolutions that every Python-level product (``@``, ``einsum``, ``linear``,
``conv2d``, autograd's backward formulas) reaches. For each float32 one it runs the user's
operator unchanged and, apart, the same operator with TF32 operands and a reference, and
hands the two error measures to a per-site accumulator.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from dataclasses import dataclass, field
from typing import Any

import torch
from torch._C import _len_torch_dispatch_stack
from torch._ops import _len_torch_dispatch_stack_pre_dispatch
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

from eigprec import _context
from eigprec import precision as _precision
from eigprec.audit.measures import _errors, _row_column_scale, _worse
from eigprec.audit.operands import gradient_of, operand_roles, overwrites_operand, writes_an_input
from eigprec.audit.recent import RecentCalls
from eigprec.tf32 import core, gpus, opaque, plain
from eigprec.tf32.dispatch import CONVS as _CONVS
from eigprec.tf32.dispatch import GEMMS as _GEMMS
from eigprec.tf32.dispatch import composite, in_no_tf32_formula, run_composite, triage
from eigprec.tf32.onednn import ieee_cpu as _ieee_cpu
from eigprec.tf32.settings import has_real_tf32

_aten = torch.ops.aten

# The functional operator to re-run for each audited packet (in-place and out= forms are
# measured through their functional twin, on the inputs as they were before the call).
_FUNCTIONAL: dict[Any, Any] = {
    packet: getattr(_aten, packet.__name__.rstrip("_")) for packet in _GEMMS
}
_FUNCTIONAL.update({packet: packet for packet in _CONVS})
_OPERANDS: dict[Any, tuple[int, ...]] = {**_GEMMS, **_CONVS}

_NOT_SEEN: dict[Any, str] = {
    **opaque.OPAQUE,
    _aten._euclidean_dist: "",
    _aten._trilinear: (
        "nn.Bilinear/F.bilinear: ATen's kernel contracts with bmm, TF32 on a GPU under the "
        "matmul switch; emulate_tf32 rebuilds it from an einsum, the audit cannot without "
        "changing your result"
    ),
}


# This package's plumbing between the user's frame and the product (never "your code").
_PLUMBING = frozenset({__file__, plain.__file__})

# How many forward calls the audit remembers for attributing their backward products: a
# training loop must not grow it by one entry per product for the whole block. A backward
# that runs after more newer forward products than this is attributed to its own frames.
FORWARD_FRAMES_LIMIT = 4096

# Private torch hooks that tie a backward product to its forward call; without them
# (another torch version) backward products are attributed to the frames at backward time.
_next_sequence_nr = getattr(torch._C._autograd, "_get_sequence_nr", None)
_current_autograd_node = getattr(torch._C, "_current_autograd_node", None)


def _current_node() -> Any:
    return None if _current_autograd_node is None else _current_autograd_node()


@dataclass
class _Site:
    """Running totals of one (call site, operator, shapes, phase)."""

    calls: int = 0
    tf32_calls: int = 0
    norm_error: float = 0.0
    entry_error: float = 0.0
    fp32_norm_error: float | None = None
    float64_calls: int = 0
    tf32_nonfinite: int = 0  # calls whose TF32 result has inf/NaN where float32's is finite
    scaled_entry_error: float | None = None  # worst |error_ij| / (‖row i of A‖ ‖column j of B‖)
    measured: int = 0  # calls measured (all of them unless the audit samples)


@dataclass
class Settings:
    rounding: str
    float64_limit: int
    only_enabled: bool
    skip: tuple[str, ...]
    depth: int
    sites: dict[tuple, _Site] = field(default_factory=dict)
    # (thread id, asyncio task) that opened the audit: autograd's worker threads, the only
    # other threads whose products reach the mode, act on its behalf (it waits for them)
    owner: tuple = field(default_factory=_context.owner)
    # autograd sequence number of a forward node -> (frames, module path) of the forward call
    forward_frames: RecentCalls = field(default_factory=lambda: RecentCalls(FORWARD_FRAMES_LIMIT))
    # paths of the nn.Modules running now in the audited thread, innermost last
    modules: list[str] = field(default_factory=list)
    # operators that multiply out of the audit's sight -> (calls, what a TF32 GPU does)
    not_covered: dict[str, list] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    # the GPU modelled (eigprec.tf32.gpus.GPUProfile): what it keeps in float32 is not audited
    gpu: Any = None
    # None: measure every call; k: each site's first k calls, then every k-th (see _due)
    sample: int | None = None


# (module name, skip prefixes) -> whether frames of that module are skipped: a product's
# walk up the stack passes ~10 torch frames, each once tested against every prefix.
_SKIPPED: dict[tuple[str, tuple[str, ...]], bool] = {}


def _skipped(module: str, skip: tuple[str, ...]) -> bool:
    known = _SKIPPED.get((module, skip))
    if known is None:
        known = any(module == p or module.startswith(p + ".") for p in skip)
        if len(_SKIPPED) < 4096:  # (bounded: module names are few, skip tuples fewer)
            _SKIPPED[(module, skip)] = known
    return known


# Code objects whose frames end the walk up the stack: the command line's runner, above
# which nothing is the script's code (python -m eigprec.audit --depth 3 names no frame of
# its own, nor of whoever called it).
BOUNDARIES: set[Any] = set()


def user_frames(skip: tuple[str, ...], depth: int) -> tuple[tuple[str, int, str], ...]:
    """The ``depth`` innermost frames outside ``skip`` modules and this package's plumbing."""
    frame = sys._getframe(1)
    found: list[tuple[str, int, str]] = []
    while frame is not None and len(found) < depth:
        code = frame.f_code
        if code in BOUNDARIES:
            break
        module = frame.f_globals.get("__name__", "")
        if code.co_filename not in _PLUMBING and not _skipped(module, skip):
            found.append((code.co_filename, frame.f_lineno, code.co_name))
        frame = frame.f_back
    return tuple(found)


def _tf32_setting(kind: str) -> bool:
    # Whether a TF32 GPU would use TF32 for this kind of product under the current settings.
    if kind == "matmul":
        matmul = torch.backends.cuda.matmul
        precision = getattr(matmul, "fp32_precision", None)
        if precision is None:
            return bool(matmul.allow_tf32)
        if precision == "none":  # inherit the generic setting
            return getattr(torch.backends, "fp32_precision", "none") == "tf32"
        return precision == "tf32"
    conv = getattr(torch.backends.cudnn, "conv", None)
    precision = getattr(conv, "fp32_precision", None)
    if precision is None:
        return bool(torch.backends.cudnn.allow_tf32)
    if precision == "none":
        return getattr(torch.backends, "fp32_precision", "none") == "tf32"
    return precision == "tf32"


def _gpu_tf32(kind: str, on: bool, me: Any = None) -> contextlib.AbstractContextManager:
    # Flip the one setting the GPU library reads for this kind of product, then restore it
    # exactly ('none' included), under the precision protocol: other threads' blocks wait.
    owner: Any = torch.backends.cuda.matmul if kind == "matmul" else torch.backends.cudnn
    attr, value = "allow_tf32", on
    new = owner if kind == "matmul" else getattr(owner, "conv", None)
    if hasattr(new, "fp32_precision"):
        owner, attr, value = new, "fp32_precision", "tf32" if on else "ieee"
    return _precision._switched(owner, attr, value, me)


def _multiply_adds(packet: Any, args: tuple, output: torch.Tensor) -> int:
    if packet is _aten.convolution:
        weight = args[1]
        return output.numel() * (weight[0].numel() if weight.dim() else 1)
    if packet is _aten.convolution_backward:
        # Each gradient costs about as much as the forward convolution.
        weight = args[2]
        return 2 * args[0].numel() * (weight[0].numel() if weight.dim() else 1)
    first, second = (args[i] for i in _OPERANDS[packet])
    return first.numel() * second.shape[-1]  # (batch ×) m × k, times n


# Under sampling: the output whose site counts a packet's calls, and every output's site.
_COUNTED = {_aten.convolution_backward: "[weight]"}
_OUTPUTS = {_aten.convolution_backward: ((0, "[input]"), (1, "[weight]"))}


def _measured_outputs(out: Any, packet: Any) -> list[tuple[int, str]]:
    # (output index, label suffix) to measure; convolution_backward's bias gradient is a
    # sum, not a product, and a gradient not asked for comes back as None.
    if packet is _aten.convolution_backward:
        names = ("[input]", "[weight]")
        return [(j, names[j]) for j in (0, 1) if isinstance(out[j], torch.Tensor)]
    return [(0, "")]


class AuditMode(plain.TF32Mode, TorchDispatchMode):
    """Runs each op as given; measures float32 GEMMs and convolutions on the side."""

    def __init__(self, settings: Settings) -> None:
        super().__init__()
        self.settings = settings

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        seen = triage(func, args, kwargs)
        if seen is None:  # (the common case, kept cheap; sparse/nested: untouched)
            return func(*args, **(kwargs or {}))
        packet, operands, kwargs = seen
        if operands is None and packet in _NOT_SEEN:
            if packet is _aten._euclidean_dist:  # rebuilt bit for bit: its GEMM is audited
                with self:
                    return opaque.euclidean_dist(*args, **kwargs)
            if not opaque.tf32_applies(packet, args):
                return func(*args, **kwargs)
            with self.settings.lock:
                entry = self.settings.not_covered.setdefault(
                    packet.__name__, [0, _NOT_SEEN[packet]]
                )
                entry[0] += 1
            return func(*args, **kwargs)
        if operands is None and composite(func):
            # Under inference_mode autograd is skipped, so composite operators (matmul,
            # linear, einsum, conv2d...) reach this mode whole: run their C++ composite
            # kernel, which is what the dispatcher would run, with the audit on for its
            # pieces.
            with self:
                return run_composite(func, args, kwargs)
        if operands is not None and gpus.complex64_operands(args, operands):
            return self._complex64(func, packet, args, kwargs)
        if operands is None or not self._wanted(args, operands) or in_no_tf32_formula():
            # (torch runs some derivative formulas with TF32 off: no TF32 there to measure)
            return func(*args, **kwargs)
        if self.settings.gpu is not None and self.settings.gpu.keeps_float32(packet, args):
            return func(*args, **kwargs)  # (the GPU named keeps it in float32)
        if not has_real_tf32(args[operands[0]].device):
            return self._audit(func, packet, args, kwargs, operands, None)
        # A TF32 GPU: the side product flips a process-wide switch. Hold the precision alone
        # from reading the setting to the user's own product, so that both run at the setting
        # read and no other thread's block runs while it is flipped.
        me = self.settings.owner if _context.owner()[0] != self.settings.owner[0] else None
        with _precision._exclusive(me):
            return self._audit(func, packet, args, kwargs, operands, me)

    def _audit(
        self,
        func: Any,
        packet: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        operands: tuple[int, ...],
        me: Any,
    ) -> Any:
        kind = "conv" if packet in _CONVS else "matmul"
        enabled = _tf32_setting(kind)
        if self.settings.only_enabled and not enabled:
            return func(*args, **kwargs)
        frames, phase, module, label = self._where(func, packet, args, operands)
        if self.settings.sample is not None and not self._due(
            packet, args, (frames, module), phase, label, enabled
        ):
            return func(*args, **kwargs)
        if not writes_an_input(packet, args, kwargs):
            # The user's operator first: where it fails (shapes, dtypes), the error is its
            # own, raised from the user's call, before any work of the audit's.
            out = func(*args, **kwargs)
            side = self._side_results(packet, args, kwargs, operands, kind, enabled, me)
        else:
            # In place, or out= over an input: the side products must see the inputs before
            # the call writes over them, so they run first; should they fail, the user's
            # own call runs and raises its own error.
            try:
                side = self._side_results(packet, args, kwargs, operands, kind, enabled, me)
            except Exception as error:
                failure: Exception | None = error
            else:
                failure = None
            if failure is not None:
                func(*args, **kwargs)
                raise failure
            out = func(*args, **kwargs)
        self._record(packet, args, out, side, (frames, module), phase, enabled, kind, label)
        return out

    def _complex64(self, func: Any, packet: Any, args: tuple, kwargs: dict[str, Any]) -> Any:
        # A complex64 GEMM: named as run but not covered (not measured on a GPU yet).
        if (
            not plain.IN_VECTOR_PRODUCT.get()
            and not in_no_tf32_formula()
            and (not self.settings.only_enabled or _tf32_setting("matmul"))
        ):
            with self.settings.lock:
                entry = self.settings.not_covered.setdefault(
                    f"{packet.__name__}[complex64]", [0, gpus.COMPLEX64_GAP]
                )
                entry[0] += 1
        return func(*args, **kwargs)

    # -- what to audit, and where it came from ------------------------------------------

    def _due(
        self, packet: Any, args: tuple, frames: tuple, phase: str, label: str, enabled: bool
    ) -> bool:
        # Under sampling: whether this call is measured (each site's first k calls, then
        # every k-th), so that a long run pays the side products on one step in k while
        # every site's first steps are measured in full. A call left out is counted here.
        k = self.settings.sample
        shapes = tuple(tuple(args[i].shape) for i in _OPERANDS[packet])
        name = packet.__name__ + label
        # convolution_backward's gradients are sites of their own: its weight's one counts
        site_key = (frames[0], name + _COUNTED.get(packet, ""), shapes, phase, frames[1])
        with self.settings.lock:
            site = self.settings.sites.get(site_key)
            n = 1 if site is None else site.calls + 1
            if n <= k or n % k == 0:
                return True
            for _, suffix in _OUTPUTS.get(packet, ((0, ""),)):
                other = self.settings.sites.get(
                    (frames[0], name + suffix, shapes, phase, frames[1])
                )
                if other is not None:
                    other.calls += 1
                    other.tf32_calls += int(enabled)
        return False

    @staticmethod
    def _wanted(args: tuple[Any, ...], operands: tuple[int, ...]) -> bool:
        mats = [args[i] for i in operands if i < len(args)]
        return (
            not plain.IN_VECTOR_PRODUCT.get()  # vector @ matrix: float32 on a GPU
            and len(mats) == len(operands)
            and all(
                isinstance(m, torch.Tensor)
                and m.dtype == torch.float32
                and m.layout == torch.strided
                for m in mats
            )
            and mats[0].device.type in ("cpu", "cuda")
        )

    def _where(
        self, func: Any, packet: Any, args: tuple[Any, ...], operands: tuple[int, ...]
    ) -> tuple[tuple, str, str, str]:
        # (user frames, phase, module path, gradient label) of the product running now; the
        # label ("[weight grad]"...) tells apart the backward products of one forward call.
        s = self.settings
        node = _current_node()
        if node is not None:
            # Backward: attribute to the forward call that created the node, when seen.
            seen = s.forward_frames.get(node._sequence_nr())
            if seen is None:
                return user_frames(s.skip, s.depth), f"backward ({node.name()})", "", ""
            label = gradient_of(seen[2], args, operands) if seen[2] else ""
            return seen[0], f"backward ({node.name()})", seen[1], label
        frames = user_frames(s.skip, s.depth)
        module = s.modules[-1] if s.modules else ""
        if (
            _next_sequence_nr is not None
            and torch.is_grad_enabled()
            and any(isinstance(a, torch.Tensor) and a.requires_grad for a in args)
        ):
            # Autograd numbered this op's node just before dispatching to us.
            roles = operand_roles(func, args, operands) if packet in _GEMMS else ()
            with s.lock:
                s.forward_frames.put(_next_sequence_nr() - 1, (frames, module, roles))
        return frames, "forward", module, ""

    # -- the side computations ----------------------------------------------------------

    def _side_results(
        self,
        packet: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        operands: tuple[int, ...],
        kind: str,
        enabled: bool,
        me: Any = None,
    ) -> dict[str, Any]:
        # Computed before the user's op so that in-place forms still see their inputs.
        s = self.settings
        fn = _FUNCTIONAL[packet].default
        kw = {k: v for k, v in kwargs.items() if k != "out"}
        device = args[operands[0]].device
        side: dict[str, Any] = {}
        # Decided before the modes are disabled and the CPU pinned to IEEE (inside those
        # both tests are always false): an outer mode (the emulator, say) or oneDNN's
        # reduced precision changes the user's result, so float32 comes from a clean run;
        # so does an op that writes over its own operand (out=, in place), whose result is
        # then not the product of the operands as they were.
        aliased = overwrites_operand(packet, args, kwargs, operands)
        reduced = _cpu_reduced(device, kind)
        clean_fp32 = _len_torch_dispatch_stack() > 0 or reduced or aliased
        nan_free: tuple[int, ...] = ()  # operands read to hold no NaN
        with _modes_off():
            # What the op reads, before it may write over it.
            side["shapes"] = tuple(tuple(args[i].shape) for i in _OPERANDS[packet])
            if packet in _GEMMS:
                scale, no_nan = _row_column_scale(*(args[i] for i in _GEMMS[packet]))
                nan_free = _GEMMS[packet] if no_nan else ()
                if packet in (_aten.addbmm, _aten.addbmm_):  # the batch's products are summed
                    scale = ((scale[0] * scale[1]).sum(0), torch.ones((), dtype=scale[0].dtype))
                side["scale"] = scale
            if has_real_tf32(device):
                # The op as cuBLAS/cuDNN runs it in TF32 and at full float32; the one that
                # matches the current setting is the user's own result, taken afterwards
                # (unless the op overwrites an operand: then it is run here too).
                with _gpu_tf32(kind, not enabled, me):
                    side["tf32" if not enabled else "fp32"] = fn(*args, **kw)
                if aliased:
                    side["fp32" if not enabled else "tf32"] = fn(*args, **kw)
            else:
                rounded = tuple(
                    core.round_bits(a.detach(), s.rounding, nan_free=i in nan_free)
                    if i in operands
                    else a
                    for i, a in enumerate(args)
                )
                # (oneDNN already at IEEE, the common case: no pin to take and put back)
                pin = _ieee_cpu(args[operands[0]], kind) if reduced else contextlib.nullcontext()
                with pin:
                    side["tf32"] = fn(*rounded, **kw)
                    if clean_fp32:
                        side["fp32"] = fn(*args, **kw)
            first = side.get("tf32", side.get("fp32"))
            if packet is _aten.convolution_backward:
                first = first[0] if first[0] is not None else first[1]
            side["flops"] = _multiply_adds(packet, args, first)
            if side["flops"] <= s.float64_limit:
                wide = tuple(
                    a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a
                    for a in args
                )
                side["fp64"] = fn(*wide, **kw)
        return side

    def _record(
        self,
        packet: Any,
        args: tuple[Any, ...],
        out: Any,
        side: dict[str, Any],
        frames: tuple,
        phase: str,
        enabled: bool,
        kind: str,
        label: str = "",
    ) -> None:
        with _modes_off():
            owned = "tf32" in side  # (the audit's own result: measured in place)
            if not owned:  # a TF32 GPU that ran the user's op in TF32
                side["tf32"] = out
            fp32 = side.get("fp32", out)
            fp64 = side.get("fp64")
            name = packet.__name__
            shapes = side["shapes"]
            for j, suffix in _measured_outputs(out, packet):
                tf32_j = _pick(side["tf32"], packet, j)
                fp32_j = _pick(fp32, packet, j)
                ref = _pick(fp64, packet, j) if fp64 is not None else fp32_j
                scale = side.get("scale")
                scaled: list = [None]
                norm_e, entry_e, fp32_e, nonfinite = _errors(
                    tf32_j,
                    ref,
                    fp32_j if fp64 is not None else None,
                    fp32_j,
                    scale,
                    scaled,
                    owned,
                )
                key = (frames[0], name + suffix + label, shapes, phase, frames[1])
                self._add(key, enabled, norm_e, entry_e, fp32_e, nonfinite, scaled[0])

    def _add(
        self,
        key: tuple,
        enabled: bool,
        norm_e: float,
        entry_e: float,
        fp32_e: float | None,
        nonfinite: bool,
        scaled_e: float | None = None,
    ) -> None:
        with self.settings.lock:
            site = self.settings.sites.setdefault(key, _Site())
            if scaled_e is not None:
                old = site.scaled_entry_error
                site.scaled_entry_error = scaled_e if old is None else _worse(old, scaled_e)
            site.calls += 1
            site.measured += 1
            site.tf32_nonfinite += int(nonfinite)
            site.tf32_calls += int(enabled)
            site.norm_error = _worse(site.norm_error, norm_e)
            site.entry_error = _worse(site.entry_error, entry_e)
            if fp32_e is not None:
                site.float64_calls += 1
                site.fp32_norm_error = (
                    fp32_e if site.fp32_norm_error is None else max(site.fp32_norm_error, fp32_e)
                )


def _cpu_reduced(device: torch.device, kind: str) -> bool:
    # oneDNN's effective float32 precision for this kind of product ("none" inherits).
    if device.type != "cpu" or not hasattr(
        getattr(torch.backends.mkldnn, kind, None), "fp32_precision"
    ):
        return False
    paths = (("mkldnn", kind, "fp32_precision"), ("mkldnn", "fp32_precision"), ("fp32_precision",))
    return _precision._effective(*paths) != "ieee"


def _modes_off() -> contextlib.AbstractContextManager:
    # _disable_current_modes, except that with no mode to disable (the audit alone: torch
    # pops the running mode during its __torch_dispatch__) it skips its ~8 µs of imports
    # and list building, twice per audited product.
    if _len_torch_dispatch_stack() or _len_torch_dispatch_stack_pre_dispatch():
        return _disable_current_modes()
    return contextlib.nullcontext()


def _pick(out: Any, packet: Any, j: int) -> torch.Tensor:
    return out[j] if packet is _aten.convolution_backward else out


class AttributionMode(AuditMode):
    """Runs a block with TF32 rounding at chosen product sites only; counts every site.

    A site is keyed as in the audit: (user frames, operator, operand shapes, phase), so
    that the keys of one run match those of the next run of the same block.
    """

    def __init__(self, settings: Settings, selected: frozenset | None, emulator: Any) -> None:
        super().__init__(settings)
        self.selected = selected  # None: every site
        self.emulator = emulator  # a TF32EmulationMode that rounds whatever reaches it
        self.seen: dict[tuple, int] = {}

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        seen = triage(func, args, kwargs)
        if seen is None:
            return func(*args, **(kwargs or {}))
        packet, operands, kwargs = seen
        if operands is None and composite(func):
            with self:
                return run_composite(func, args, kwargs)
        if operands is None or not self._wanted(args, operands) or in_no_tf32_formula():
            return func(*args, **kwargs)
        frames, phase, module, label = self._where(func, packet, args, operands)
        shapes = tuple(tuple(args[i].shape) for i in operands)
        key = (frames, packet.__name__ + label, shapes, phase, module)
        self.seen[key] = self.seen.get(key, 0) + 1
        if self.selected is None or key in self.selected:
            with self.emulator:
                return func(*args, **kwargs)
        return func(*args, **kwargs)
