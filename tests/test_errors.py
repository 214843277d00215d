"""The library's one error convention, as the API page states it.

``TypeError`` for a wrong type or dtype, ``ValueError`` for a wrong value or shape,
``IndexError`` for an index out of range — raised before any work, with a message that
names the argument. One representative misuse of each kind per public function.
"""

from __future__ import annotations

import pytest
import torch

import eigprec

E = torch.eye(4, dtype=torch.float64)
X32 = torch.eye(3)
P = torch.nn.Parameter(torch.zeros(4, 3))

CASES = [
    # (what, call, exception, a word the message must contain)
    ("kth_eigvalsh list", lambda: eigprec.kth_eigvalsh([[1.0]], 0), TypeError, "Tensor"),
    ("kth_eigvalsh int dtype", lambda: eigprec.kth_eigvalsh(X32.long(), 0), TypeError, "float32"),
    ("kth_eigvalsh non-square", lambda: eigprec.kth_eigvalsh(X32[:2], 0), ValueError, "square"),
    ("kth_eigvalsh k float", lambda: eigprec.kth_eigvalsh(X32, 1.0), TypeError, "k"),
    ("kth_eigvalsh k out of range", lambda: eigprec.kth_eigvalsh(X32, 3), IndexError, "k"),
    (
        "kth_eigvalsh backend",
        lambda: eigprec.kth_eigvalsh(X32, 0, backend="x"),
        ValueError,
        "backend",
    ),
    ("kth_eigvalsh lower", lambda: eigprec.kth_eigvalsh(X32, 0, lower=None), TypeError, "lower"),
    ("round_tf32 list", lambda: eigprec.round_tf32([1.0]), TypeError, "Tensor"),
    ("round_tf32 float64", lambda: eigprec.round_tf32(E), TypeError, "float32"),
    ("round_tf32 rounding", lambda: eigprec.round_tf32(X32, rounding="up"), ValueError, "rounding"),
    ("matmul_3xtf32 shapes", lambda: eigprec.matmul_3xtf32(X32, X32[:2]), ValueError, "dimensions"),
    (
        "matmul_precision mode",
        lambda: eigprec.matmul_precision("fast").__enter__(),
        ValueError,
        "fast",
    ),
    ("principal_angles list", lambda: eigprec.principal_angles([[1.0]], E), TypeError, "A"),
    ("principal_angles rows", lambda: eigprec.principal_angles(E, E[:3, :2]), ValueError, "rows"),
    (
        "principal_angles degrees",
        lambda: eigprec.principal_angles(E, E, degrees="no"),
        TypeError,
        "degrees",
    ),
    ("subspace_angle k float", lambda: eigprec.subspace_angle(E, E, 1.5), TypeError, "k"),
    ("subspace_angle k too big", lambda: eigprec.subspace_angle(E, E, 9), ValueError, "k"),
    (
        "eigenvalue_clusters rel_gap bool",
        lambda: eigprec.eigenvalue_clusters(torch.ones(3), True),
        TypeError,
        "rel_gap",
    ),
    (
        "eigenvalue_clusters rel_gap negative",
        lambda: eigprec.eigenvalue_clusters(torch.ones(3), -1.0),
        ValueError,
        "rel_gap",
    ),
    ("davis_kahan_bound gap", lambda: eigprec.davis_kahan_bound(0.1, -1.0), ValueError, "gap"),
    ("SOAP lr string", lambda: eigprec.SOAP([P], lr="0.1"), TypeError, "lr"),
    ("SOAP lr negative", lambda: eigprec.SOAP([P], lr=-1.0), ValueError, "lr"),
    (
        "SOAP nesterov string",
        lambda: eigprec.SOAP([P], lr=0.1, nesterov="no"),
        TypeError,
        "nesterov",
    ),
    ("ema_first_weight beta", lambda: eigprec.ema_first_weight(1.5, 3), ValueError, "shampoo_beta"),
    (
        "time_side_by_side repeats",
        lambda: eigprec.time_side_by_side({"a": int}, repeats=0),
        ValueError,
        "repeats",
    ),
    (
        "time_side_by_side device type",
        lambda: eigprec.time_side_by_side({"a": int}, device=3),
        TypeError,
        "device",
    ),
    (
        "time_side_by_side device name",
        lambda: eigprec.time_side_by_side({"a": int}, device="gpu"),
        ValueError,
        "device",
    ),
    ("SOAP duplicate parameter", lambda: eigprec.SOAP([P, P], lr=0.1), ValueError, "twice"),
]


@pytest.mark.parametrize(("what", "call", "error", "word"), CASES, ids=[c[0] for c in CASES])
def test_one_error_convention(what, call, error, word):
    with pytest.raises(error) as info:
        call()
    assert type(info.value) is error, f"{what}: {type(info.value).__name__} is a subclass only"
    assert word.lower() in str(info.value).lower(), f"{what}: message {info.value} omits {word!r}"
