"""What the TF32 chapter says about torch's switches and the emulator's scope, measured live.

Each function reads the installed torch (in a fresh interpreter where an environment
variable must be set before torch starts) and leaves every setting as it found it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import torch

from eigprec.precision import matmul_precision
from eigprec.tf32 import emulate_tf32

__all__ = [
    "compile_under_emulator_check",
    "conv_emulation_check",
    "env_override_check",
    "matvec_scope_check",
    "mixed_api_check",
    "what_to_set_check",
]

_READ_SETTINGS = """
import json, torch
m = torch.backends.cuda.matmul
start = {"precision": torch.get_float32_matmul_precision(),
         "allow_tf32": bool(m.allow_tf32),
         "fp32_precision": getattr(m, "fp32_precision", None)}
torch.set_float32_matmul_precision("highest")
start["allow_tf32_after_highest"] = bool(m.allow_tf32)
start["fp32_precision_after_highest"] = getattr(m, "fp32_precision", None)
print(json.dumps(start))
"""


def env_override_check(value: str = "1", timeout: float = 120.0) -> dict[str, object]:
    """torch's float32 matmul settings at start-up under ``TORCH_ALLOW_TF32_CUBLAS_OVERRIDE``.

    A fresh interpreter, with the variable set to ``value`` (``"1"`` as in NVIDIA's NGC
    containers), imports torch and reports ``get_float32_matmul_precision()``,
    ``cuda.matmul.allow_tf32`` and ``cuda.matmul.fp32_precision``, then calls
    ``torch.set_float32_matmul_precision("highest")`` and reads the last two again (does
    the variable only set the start value, or does it stick?).

    Args:
        value: the variable's value; ``""`` removes it from the environment.
        timeout: seconds to wait for the interpreter.

    Returns:
        ``{"precision", "allow_tf32", "fp32_precision"}`` as torch starts, and
        ``allow_tf32_after_highest`` and ``fp32_precision_after_highest``.

    Raises:
        RuntimeError: if the interpreter fails.

    Example:
        >>> env_override_check("1")["precision"]
        'high'
    """
    env = {k: v for k, v in os.environ.items() if k != "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE"}
    if value:
        env["TORCH_ALLOW_TF32_CUBLAS_OVERRIDE"] = value
    return _fresh_interpreter([_READ_SETTINGS], env, timeout)


def _fresh_interpreter(args: list[str], env: dict[str, str], timeout: float) -> dict:
    """What ``python -c <args>`` in a fresh interpreter printed last, as JSON."""
    proc = subprocess.run(
        [sys.executable, "-c", *args], env=env, capture_output=True, text=True, timeout=timeout
    )
    if proc.returncode != 0:
        raise RuntimeError(f"reading torch's settings failed: {proc.stderr[-500:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def mixed_api_check() -> dict[str, bool]:
    """Whether the legacy getters raise once only the new cuBLAS setting was changed.

    Sets ``torch.backends.cuda.matmul.fp32_precision = "tf32"`` alone (inside
    :func:`~eigprec.precision.matmul_precision`, which restores everything) and calls
    ``torch.get_float32_matmul_precision()`` and the ``allow_tf32`` getter.

    Returns:
        ``{"has_new_api", "precision_getter_raises", "allow_tf32_getter_raises"}``.

    Example:
        >>> sorted(mixed_api_check())
        ['allow_tf32_getter_raises', 'has_new_api', 'precision_getter_raises']
    """
    matmul = torch.backends.cuda.matmul
    result = {
        "has_new_api": hasattr(matmul, "fp32_precision"),
        "precision_getter_raises": False,
        "allow_tf32_getter_raises": False,
    }
    if not result["has_new_api"]:
        return result
    with matmul_precision("highest"):
        matmul.fp32_precision = "tf32"
        for key, getter in (
            ("precision_getter_raises", torch.get_float32_matmul_precision),
            ("allow_tf32_getter_raises", lambda: matmul.allow_tf32),
        ):
            try:
                getter()
            except RuntimeError:
                result[key] = True
    return result


#: The settings the TF32 chapter's "What to set" box compares, each from torch's start-up
#: state: name -> the statements run.
SCENARIOS = {
    "generic": 'torch.backends.fp32_precision = "ieee"',
    "high_then_generic": (
        'torch.set_float32_matmul_precision("high"); torch.backends.fp32_precision = "ieee"'
    ),
    "legacy": (
        'torch.set_float32_matmul_precision("high"); '
        'torch.set_float32_matmul_precision("highest"); torch.backends.cudnn.allow_tf32 = False'
    ),
    "high_then_generic_and_matmul": (
        'torch.set_float32_matmul_precision("high"); torch.backends.fp32_precision = "ieee"; '
        'torch.backends.cuda.matmul.fp32_precision = "ieee"'
    ),
    "matmul_only": 'torch.backends.cuda.matmul.fp32_precision = "tf32"',
}

# One interpreter imports torch once, then runs each scenario in a forked child, so that
# every scenario starts from torch's start-up state.
_READ_AFTER = """
import json, os, sys, torch
from eigprec.tf32.settings import tf32_conv_enabled, tf32_matmul_enabled, tf32_rnn_enabled
B = torch.backends
GETTERS = (
    ("torch.get_float32_matmul_precision()", torch.get_float32_matmul_precision),
    ("torch.backends.cuda.matmul.allow_tf32", lambda: B.cuda.matmul.allow_tf32),
    ("torch.backends.cudnn.allow_tf32", lambda: B.cudnn.allow_tf32),
)

def state():
    return {"matmul": tf32_matmul_enabled(), "conv": tf32_conv_enabled(), "rnn": tf32_rnn_enabled()}

def scenario(statements):
    exec(statements)
    raised = []
    for name, getter in GETTERS:
        try:
            getter()
        except RuntimeError:
            raised.append(name)
    return {"tf32": state(), "getters_raise": raised}

out = {"start": state()}
for name, statements in json.loads(sys.argv[1]).items():
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        os.write(write, json.dumps(scenario(statements)).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        out[name] = json.loads(pipe.read())
    os.waitpid(pid, 0)
print(json.dumps(out))
"""


def what_to_set_check(timeout: float = 120.0) -> dict[str, object]:
    """The facts of the TF32 chapter's "What to set" box, read from the installed torch.

    Each of :data:`SCENARIOS` runs from torch's start-up state, in a child of a fresh
    interpreter (so nothing here changes), which reports whether cuBLAS matmuls, cuDNN
    convolutions and cuDNN RNNs would then run in TF32 (:func:`eigprec.tf32_matmul_enabled`
    and its siblings, which follow torch's inheritance of ``fp32_precision``) and which
    legacy getters raise.

    Args:
        timeout: seconds to wait for the interpreter.

    Returns:
        ``{"has_new_api": True, "start": {...}, scenario: {"tf32", "getters_raise"}, ...}``
        (only ``has_new_api`` before torch 2.9); ``start`` is what TF32 applies to as torch
        starts.

    Raises:
        RuntimeError: if an interpreter fails.

    Example:
        >>> facts = what_to_set_check()
        >>> facts["generic"]["tf32"], facts["high_then_generic"]["tf32"]["matmul"]
        ({'matmul': False, 'conv': False, 'rnn': False}, True)
    """
    if not hasattr(torch.backends, "fp32_precision"):
        return {"has_new_api": False}
    # (the child imports eigprec from where this process does)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    env.pop("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE", None)  # torch's own start-up state
    read = _fresh_interpreter([_READ_AFTER, json.dumps(SCENARIOS)], env, timeout)
    return {"has_new_api": True, **read}


# An operand whose TF32 rounding is visible: 1 + 2**-12 rounds to 1 (below the tie).
_OFF = 1 + 2**-12


def matvec_scope_check() -> dict[str, float]:
    """What the emulator does to a matrix-matrix and a matrix-vector product.

    ``A = [[1 + 2**-12]]`` times ones, at precision 'high' under
    ``emulate_tf32(force=True)``: as ``mm`` (``A @ B``) and as ``mv`` (``A @ v``).

    Returns:
        ``{"mm": ..., "mv": ...}``: each result minus 1 (0 where A was rounded, 2**-12
        where it was not).

    Example:
        >>> matvec_scope_check()["mm"]
        0.0
    """
    a = torch.tensor([[_OFF]])
    with matmul_precision("high"), emulate_tf32(force=True):
        mm = (a @ torch.ones(1, 1)).item() - 1
        mv = (a @ torch.ones(1)).item() - 1
    return {"mm": mm, "mv": mv}


def conv_emulation_check() -> dict[str, object]:
    """Whether :func:`~eigprec.tf32.emulate_tf32` rounds convolution operands, and obeys cuDNN.

    A 1×1 ``conv2d`` of the input ``1 + 2**-12`` with weight 1 under
    ``emulate_tf32(force=True)``: once at the defaults (``cudnn.allow_tf32`` as torch
    starts) and once inside ``torch.backends.cudnn.flags(allow_tf32=False)``.

    Returns:
        ``{"cudnn_allow_tf32", "rounded", "rounded_when_off"}``: the cuDNN switch at the
        defaults and whether the convolution's result lost the ``2**-12`` at the defaults
        and with the switch off.

    Example:
        >>> sorted(conv_emulation_check())
        ['cudnn_allow_tf32', 'rounded', 'rounded_when_off']
    """
    x = torch.full((1, 1, 1, 1), _OFF)
    w = torch.ones(1, 1, 1, 1)
    with emulate_tf32(force=True):
        rounded = torch.nn.functional.conv2d(x, w).item() == 1.0
    cudnn = torch.backends.cudnn
    with cudnn.flags(enabled=cudnn.enabled, allow_tf32=False), emulate_tf32(force=True):
        rounded_off = torch.nn.functional.conv2d(x, w).item() == 1.0
    return {
        "cudnn_allow_tf32": bool(cudnn.allow_tf32),
        "rounded": rounded,
        "rounded_when_off": rounded_off,
    }


def compile_under_emulator_check() -> dict[str, float]:
    """What a ``torch.compile``d product returns when called inside ``emulate_tf32``.

    Returns:
        ``{"compiled": ..., "eager": ...}``: each result minus 1, for ``[[1 + 2**-12]] @
        [[1]]`` at precision 'high' under ``emulate_tf32(force=True)``.

    Example:
        >>> check = compile_under_emulator_check()
        >>> check["eager"]
        0.0
    """
    a, b = torch.tensor([[_OFF]]), torch.ones(1, 1)
    compiled = torch.compile(torch.matmul)
    with matmul_precision("high"), emulate_tf32(force=True):
        return {"compiled": compiled(a, b).item() - 1, "eager": (a @ b).item() - 1}
