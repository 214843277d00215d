"""TF32 helpers' arguments and edge cases (issue 21, items 9, 10 and 14).

Decided behaviour: ``tf32_mode``, ``is_tf32_capability`` and ``has_real_tf32`` refuse what is
not an argument of theirs (``TypeError`` for a wrong kind, ``ValueError`` for a wrong value);
``has_real_tf32(0)`` answers False where there is no CUDA; ``round_tf32`` accepts negated
views (``z.conj().imag``) like ``split_tf32``, passes meta tensors through (shape only) and
refuses sparse tensors; ``matmul_3xtf32`` may overflow within 0.1 % of float32's largest
value, as its docstring states.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from eigprec import (
    has_real_tf32,
    is_tf32_capability,
    matmul_3xtf32,
    round_tf32,
    split_tf32,
    tf32_mode,
)

# --- item 10: tf32_mode validates its arguments ----------------------------------------


@pytest.mark.parametrize("prec", ["Highest", "highest ", "", "fast", "HIGH"])
def test_tf32_mode_refuses_unknown_precisions(prec):
    with pytest.raises(ValueError, match="fp32_matmul_prec must be one of"):
        tf32_mode("cpu", prec, torch.float32)


@pytest.mark.parametrize("prec", [None, 1, True, b"high"])
def test_tf32_mode_refuses_non_string_precisions(prec):
    with pytest.raises(TypeError, match="fp32_matmul_prec must be a str"):
        tf32_mode("cpu", prec, torch.float32)


@pytest.mark.parametrize("dtype", ["float32", np.float32, float, None])
def test_tf32_mode_refuses_dtypes_that_are_not_torch_dtypes(dtype):
    with pytest.raises(TypeError, match=r"dtype must be a torch\.dtype"):
        tf32_mode("cpu", "high", dtype)


def test_tf32_mode_still_answers_for_valid_arguments():
    assert tf32_mode("cpu", "high", torch.float32) == "emulated"
    assert tf32_mode("cpu", "medium", torch.float32) == "emulated"
    assert tf32_mode("cpu", "highest", torch.float32) == "none"
    assert tf32_mode("cpu", "high", torch.float64) == "none"
    with pytest.raises(TypeError, match="device must be"):
        tf32_mode(None, "high", torch.float32)


# --- item 14: capability and device arguments --------------------------------------------


@pytest.mark.parametrize("cap", [(8,), (8, 0, 1), 8.6, "8.6", (8.0, 6), (True, 0), None])
def test_is_tf32_capability_refuses_what_is_not_a_pair_of_ints(cap):
    with pytest.raises(TypeError, match="pair of ints"):
        is_tf32_capability(cap)


def test_is_tf32_capability_accepts_pairs_of_ints():
    assert is_tf32_capability((8, 0)) is (torch.version.hip is None)
    assert is_tf32_capability([np.int64(9), np.int64(0)]) is (torch.version.hip is None)
    assert is_tf32_capability((7, 5)) is False


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without CUDA")
def test_has_real_tf32_of_an_index_is_false_without_cuda():
    assert has_real_tf32(0) is False
    assert has_real_tf32(np.int64(0)) is False
    assert has_real_tf32("cuda:0") is False


@pytest.mark.parametrize(
    ("device", "error"),
    [
        (None, TypeError),
        (True, TypeError),
        (1.0, TypeError),
        (-1, ValueError),
        ("gpu0", ValueError),
    ],
)
def test_has_real_tf32_refuses_what_is_not_a_device(device, error):
    with pytest.raises(error):
        has_real_tf32(device)


# --- item 14: round_tf32 on views and layouts ----------------------------------------------


def test_round_tf32_accepts_a_negated_view_like_split_tf32():
    z = torch.tensor([1 + (1 + 2**-11 + 2**-13) * 1j], dtype=torch.complex64)
    view = z.conj().imag
    assert view.is_neg()
    expected = round_tf32(-z.imag.clone())
    assert torch.equal(round_tf32(view), expected)
    assert torch.equal(split_tf32(view)[0], round_tf32(view, "rne"))


def test_round_tf32_passes_meta_tensors_through():
    out = round_tf32(torch.empty(3, 4, device="meta"))
    assert out.device.type == "meta" and out.shape == (3, 4)


@pytest.mark.parametrize("func", [round_tf32, split_tf32, lambda x: matmul_3xtf32(x, x)])
def test_sparse_inputs_are_refused_clearly(func):
    with pytest.raises(TypeError, match="dense \\(strided\\) tensor"):
        func(torch.eye(3).to_sparse())


# --- item 9: overflow of matmul_3xtf32 near float32's largest value ------------------------


def test_3xtf32_overflow_is_the_documented_one():
    a = torch.tensor([[2.0**64 - 2.0**40]])
    b = torch.tensor([[2.0**64]])
    assert (a @ b).item() == torch.finfo(torch.float32).max  # finite in float32
    assert split_tf32(a)[0].item() == 2.0**64  # the big part rounds up...
    assert matmul_3xtf32(a, b).item() == float("inf")  # ...and the product overflows
    # The docstring's bound: below (1 - 2**-10) * 2**128 it stays finite and exact-ish.
    doc = matmul_3xtf32.__doc__
    assert "within 0.1 % of the" in doc and "2**64 - 2**40" in doc
    assert (a * 2.0**-1 @ b).isfinite().all()
    half = matmul_3xtf32(a * 0.5, b)
    assert half.item() == (a * 0.5 @ b).item()


def test_3xtf32_stays_finite_below_the_documented_bound():
    g = torch.Generator().manual_seed(21)
    for _ in range(5):
        a = torch.rand(8, 16, generator=g, dtype=torch.float64) + 0.5
        b = torch.rand(16, 8, generator=g, dtype=torch.float64) + 0.5
        # Scale so that the largest sum of |terms| sits at (1 - 2**-9) * 2**128.
        scale = ((1 - 2.0**-9) * 2.0**128 / (a.abs() @ b.abs()).max()).sqrt()
        a32, b32 = (a * scale).float(), (b * scale).float()
        out = matmul_3xtf32(a32, b32)
        assert out.isfinite().all()
        ref = a32.double() @ b32.double()
        assert ((out.double() - ref).abs() / ref.abs()).max() < 2.0**-20
