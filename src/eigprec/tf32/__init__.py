"""TF32: exact rounding, an emulator of TF32 GPUs, the 3xTF32 remedy and where TF32 applies.

``core`` holds the idea in one file that needs only torch (rounding and a TF32 product);
``rounding`` the default rule; ``emulate`` the context manager that runs float32 products
as a TF32 GPU runs them; ``dispatch`` which ATen operators those are (shared with
:mod:`eigprec.audit`); ``compensated`` the 3xTF32 product; ``settings`` which devices and
torch switches make TF32 apply; ``plain``, ``opaque`` and ``onednn`` the calls the
emulator runs as without it, the operators it cannot reach, and oneDNN's switch.
"""

from eigprec.tf32.compensated import matmul_3xtf32, split_tf32
from eigprec.tf32.core import TF32_MANTISSA_BITS, tf32_matmul
from eigprec.tf32.emulate import BackwardAfterExitWarning, NotEmulatedWarning, emulate_tf32
from eigprec.tf32.rounding import ROUNDING_ENV, ROUNDINGS, default_rounding, round_tf32
from eigprec.tf32.settings import has_real_tf32, is_tf32_capability, tf32_matmul_enabled, tf32_mode

__all__ = [
    "ROUNDINGS",
    "ROUNDING_ENV",
    "TF32_MANTISSA_BITS",
    "BackwardAfterExitWarning",
    "NotEmulatedWarning",
    "default_rounding",
    "emulate_tf32",
    "has_real_tf32",
    "is_tf32_capability",
    "matmul_3xtf32",
    "round_tf32",
    "split_tf32",
    "tf32_matmul",
    "tf32_matmul_enabled",
    "tf32_mode",
]
