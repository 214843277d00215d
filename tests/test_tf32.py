"""Tests of eigprec.tf32: exact rounding, the emulating mode and 3xTF32."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from eigprec_book.chapters.tf32.experiments import diag_qtlq_experiment
from eigprec_book.chapters.tf32.probes import rounding_probe
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.overrides import _get_current_function_mode_stack

import eigprec
import eigprec.tf32 as tf32
from eigprec.tf32 import (
    ROUNDINGS,
    emulate_tf32,
    has_real_tf32,
    is_tf32_capability,
    matmul_3xtf32,
    round_tf32,
    split_tf32,
    tf32_matmul_enabled,
)

MAX_TF32 = (2 - 2**-10) * 2.0**127


# --- helpers --------------------------------------------------------------------------


def bits_of(x: torch.Tensor) -> np.ndarray:
    return x.view(torch.int32).numpy().view(np.uint32)


def floats_of(bits: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(bits, dtype=np.uint32).view(np.float32))


def reference_round(x: torch.Tensor, rounding: str) -> torch.Tensor:
    """Exact TF32 rounding through float64 arithmetic, sharing no code with round_tf32.

    The TF32 spacing at x is 2**(e - 10) for |x| in [2**e, 2**(e+1)), e >= -126, and
    2**-136 below 2**-126 (subnormals keep float32's fixed spacing). x / spacing is an
    exact float64 with at most 24 significant bits, so np.trunc / np.floor / np.rint
    round it exactly; the product by a power of two is exact too.
    """
    v = x.double().numpy()
    finite = np.isfinite(v)
    a = np.abs(np.where(finite, v, 0.0))
    _, e = np.frexp(a)  # a = m * 2**e with m in [0.5, 1)
    spacing = np.ldexp(1.0, np.maximum(e - 1, -126) - 10)
    scaled = a / spacing
    if rounding == "rz":
        q = np.trunc(scaled)
    elif rounding == "rna":
        q = np.floor(scaled + 0.5)
    else:
        q = np.rint(scaled)  # ties to even
    mag = q * spacing
    if rounding != "rz":
        mag = np.where(mag > MAX_TF32, np.inf, mag)
    out = np.copysign(mag, v)
    out = np.where(finite, out, v)
    with np.errstate(over="ignore"):
        return torch.from_numpy(out.astype(np.float32))


def same_bits_or_both_nan(a: torch.Tensor, b: torch.Tensor) -> bool:
    nan_a, nan_b = torch.isnan(a), torch.isnan(b)
    if not torch.equal(nan_a, nan_b):
        return False
    return bool((bits_of(a)[~nan_a.numpy()] == bits_of(b)[~nan_b.numpy()]).all())


def random_patterns(n: int = 1_000_000, seed: int = 1) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    raw = torch.randint(-(2**31), 2**31, (n,), generator=gen, dtype=torch.int64)
    return raw.to(torch.int32).view(torch.float32)


def special_values() -> torch.Tensor:
    patterns = np.array(
        [
            0x00000000,
            0x80000000,  # +-0
            0x00000001,
            0x80000001,
            0x00000FFF,
            0x00001000,
            0x00001001,
            0x00003000,
            0x007FFFFF,
            0x807FFFFF,
            0x007FF000,
            0x007FE000,
            0x007FF001,  # subnormals
            0x00800000,
            0x3F800000,
            0xBF800000,  # min normal, +-1
            0x7F7FFFFF,
            0xFF7FFFFF,
            0x7F7FF000,
            0x7F7FEFFF,
            0x7F7FE000,
            0x7F7FF001,  # top
            0x7F800000,
            0xFF800000,  # +-inf
            0x7FC00000,
            0xFFC00000,
            0x7F800001,
            0x7F801000,
            0x7FFFFFFF,
            0xFFFFFFFF,  # NaNs
        ],
        dtype=np.uint32,
    )
    return floats_of(patterns)


def halfway_cases() -> torch.Tensor:
    """For every exponent field 0..254 and both signs: ties with even and odd kept parts,
    the patterns one unit either side of them, and the tie that carries into the next
    binade (all kept mantissa bits set)."""
    exps = np.arange(0, 255, dtype=np.uint32) << 23
    kept = np.array([0, 1, 2, 0x155, 0x3FE, 0x3FF], dtype=np.uint32) << 13
    low = np.array([0x1000, 0x0FFF, 0x1001, 0x1FFF, 0x0001], dtype=np.uint32)
    grid = (exps[:, None, None] | kept[None, :, None] | low[None, None, :]).ravel()
    return floats_of(np.concatenate([grid, grid | np.uint32(0x80000000)]))


@pytest.fixture
def precision():
    """Set the cuBLAS TF32 switch through the new API and restore every knob after."""
    matmul = torch.backends.cuda.matmul
    saved = (
        torch.backends.fp32_precision,
        matmul.fp32_precision,
        torch.backends.mkldnn.matmul.fp32_precision,
    )

    def set_tf32(on: bool) -> None:
        matmul.fp32_precision = "tf32" if on else "ieee"

    yield set_tf32
    torch.set_float32_matmul_precision("highest")
    torch.backends.fp32_precision = saved[0]
    matmul.fp32_precision = saved[1]
    torch.backends.mkldnn.matmul.fp32_precision = saved[2]


# --- round_tf32 -------------------------------------------------------------------------


def test_rne_matches_jax_reduce_precision():
    jax = pytest.importorskip(
        "jax", reason="jax (test-only dependency) provides the independent RNE reference"
    )
    x = torch.cat([random_patterns(), special_values(), halfway_cases()])
    ref = np.asarray(jax.lax.reduce_precision(x.numpy(), exponent_bits=8, mantissa_bits=10))
    got = round_tf32(x, "rne")
    assert same_bits_or_both_nan(got, torch.from_numpy(ref.copy()))


@pytest.mark.parametrize("rounding", ROUNDINGS)
def test_matches_exact_reference(rounding):
    x = torch.cat([random_patterns(seed=2), special_values(), halfway_cases()])
    assert same_bits_or_both_nan(round_tf32(x, rounding), reference_round(x, rounding))


def test_nan_and_inf_unchanged_bitwise():
    x = special_values()
    keep = ~torch.isfinite(x)
    for rounding in ROUNDINGS:
        assert (bits_of(round_tf32(x, rounding)[keep]) == bits_of(x[keep])).all()


def test_hand_picked_ties():
    x = torch.tensor([1 + 2**-11, 1 + 3 * 2**-11, -(1 + 2**-11), 1024.5, 2 - 2**-12])
    assert round_tf32(x, "rna").tolist() == [1 + 2**-10, 1 + 2**-9, -(1 + 2**-10), 1025.0, 2.0]
    assert round_tf32(x, "rne").tolist() == [1.0, 1 + 2**-9, -1.0, 1024.0, 2.0]
    assert round_tf32(x, "rz").tolist() == [1.0, 1 + 2**-10, -1.0, 1024.0, 2 - 2**-10]


def test_overflow_and_signed_zero():
    big = torch.tensor([3.4028234663852886e38, -3.4028234663852886e38, -0.0, -(2.0**-149)])
    assert round_tf32(big, "rna").tolist()[:2] == [float("inf"), float("-inf")]
    assert round_tf32(big, "rz").tolist()[:2] == [MAX_TF32, -MAX_TF32]
    for rounding in ROUNDINGS:
        zeros = round_tf32(big, rounding)[2:]
        assert zeros.tolist() == [0.0, 0.0] and torch.signbit(zeros).all()


def test_shapes_strides_and_result_is_new():
    x = torch.randn(4, 6, 5, generator=torch.Generator().manual_seed(0)).transpose(0, 2)
    y = round_tf32(x)
    assert y.shape == x.shape
    assert torch.equal(y, reference_round(x.contiguous(), "rna").reshape(x.shape))
    assert round_tf32(torch.tensor(1 + 2**-11)).item() == 1 + 2**-10
    assert round_tf32(torch.empty(0)).shape == (0,)


def test_gradient_passes_straight_through():
    x = torch.tensor([1 + 2**-11, 3.0], requires_grad=True)
    (round_tf32(x) * torch.tensor([2.0, 5.0])).sum().backward()
    assert x.grad.tolist() == [2.0, 5.0]


@pytest.mark.parametrize(
    ("bad", "error"),
    [
        (torch.ones(3, dtype=torch.float64), TypeError),
        (torch.ones(3, dtype=torch.bfloat16), TypeError),
        (torch.ones(3, dtype=torch.int32), TypeError),
        ([1.0, 2.0], TypeError),
        (np.ones(3, dtype=np.float32), TypeError),
    ],
)
def test_round_rejects_non_float32(bad, error):
    with pytest.raises(error, match=r"float32|Tensor"):
        round_tf32(bad)


@pytest.mark.parametrize("rounding", ["RNE", "nearest", "", 1])
def test_round_rejects_unknown_rounding(rounding):
    with pytest.raises(ValueError, match="rounding"):
        round_tf32(torch.ones(2), rounding)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_round_on_cuda_matches_cpu():
    x = torch.cat([random_patterns(100_000, seed=3), special_values(), halfway_cases()])
    for rounding in ROUNDINGS:
        assert same_bits_or_both_nan(round_tf32(x.cuda(), rounding).cpu(), round_tf32(x, rounding))


# --- properties -------------------------------------------------------------------------

finite32 = st.floats(width=32, allow_nan=False, allow_infinity=False)
roundings = st.sampled_from(ROUNDINGS)


@settings(max_examples=300, deadline=None)
@given(finite32, roundings)
def test_idempotent_and_representable(v, rounding):
    y = round_tf32(torch.tensor([v]), rounding)
    assert torch.equal(round_tf32(y, "rz"), y) or torch.isinf(y).all()
    assert (bits_of(y) & 0x1FFF == 0).all()


@settings(max_examples=300, deadline=None)
@given(finite32, roundings)
def test_odd_symmetry(v, rounding):
    x = torch.tensor([v, -v])
    y = round_tf32(x, rounding)
    assert bits_of(y)[1] == bits_of(y)[0] ^ 0x80000000


@settings(max_examples=300, deadline=None)
@given(finite32, finite32, roundings)
def test_monotone(v, w, rounding):
    lo, hi = sorted((v, w))
    y = round_tf32(torch.tensor([lo, hi]), rounding)
    assert y[0] <= y[1]


@settings(max_examples=300, deadline=None)
@given(finite32.filter(lambda v: abs(v) < 3e38))
def test_error_bounds(v):
    x = torch.tensor([v])
    spacing = abs(v) * 2.0**-10 if abs(v) >= 2.0**-126 else 2.0**-136
    for rounding in ("rna", "rne"):
        assert abs(round_tf32(x, rounding).double().item() - v) <= spacing / 2 * (1 + 2**-10)
    rz = round_tf32(x, "rz").double().item()
    assert abs(rz) <= abs(v) and abs(rz - v) < max(spacing, 2.0**-136)


# --- split and 3xTF32 ---------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(finite32.filter(lambda v: 2.0**-100 < abs(v) < 3e38))
def test_split_parts_are_tf32_and_close(v):
    big, small = split_tf32(torch.tensor([v]))
    assert ((bits_of(big) | bits_of(small)) & 0x1FFF == 0).all()
    assert abs(big.double().item() + small.double().item() - v) <= abs(v) * 2.0**-23


def test_3xtf32_close_to_fp32_and_tf32_far(precision):
    gen = torch.Generator().manual_seed(5)
    a = torch.randn(64, 48, generator=gen)
    b = torch.randn(48, 32, generator=gen)
    exact = a.double() @ b.double()
    scale = exact.abs().max()
    err_fp32 = ((a @ b).double() - exact).abs().max() / scale
    err_3x = (matmul_3xtf32(a, b).double() - exact).abs().max() / scale
    precision(True)
    with emulate_tf32():
        err_tf32 = ((a @ b).double() - exact).abs().max() / scale
        err_3x_emulated = (matmul_3xtf32(a, b).double() - exact).abs().max() / scale
    assert err_3x < 8 * err_fp32
    assert err_3x_emulated == err_3x  # its operands are TF32 already: emulation is inert
    assert err_tf32 > 50 * err_3x


def test_3xtf32_rejects_bad_input():
    with pytest.raises(TypeError, match="float32"):
        matmul_3xtf32(torch.ones(2, 2, dtype=torch.float64), torch.ones(2, 2))
    with pytest.raises(ValueError, match="inner dimensions"):
        matmul_3xtf32(torch.ones(2, 3), torch.ones(2, 3))
    with pytest.raises(ValueError, match="0-d"):
        matmul_3xtf32(torch.tensor(1.0), torch.ones(2))


# --- the emulating mode -------------------------------------------------------------------

_G = torch.Generator().manual_seed(11)
_M = torch.randn(4, 5, generator=_G)
_N = torch.randn(5, 3, generator=_G)
_B1 = torch.randn(2, 4, 5, generator=_G)
_B2 = torch.randn(2, 5, 3, generator=_G)
_C = torch.randn(4, 3, generator=_G)
_V = torch.randn(5, generator=_G)


def _r(t):
    return round_tf32(t)


# name, call, the same call with the multiplied operands pre-rounded
MATMUL_CASES = [
    ("@", lambda: _M @ _N, lambda: _r(_M) @ _r(_N)),
    ("matmul", lambda: torch.matmul(_M, _N), lambda: torch.matmul(_r(_M), _r(_N))),
    ("Tensor.matmul", lambda: _M.matmul(_N), lambda: _r(_M).matmul(_r(_N))),
    ("batched @", lambda: _B1 @ _N, lambda: _r(_B1) @ _r(_N)),
    # (vector @ matrix: float32 on the measured H100 and H200, not emulated; issue 34 item 3,
    # tests/test_tf32_values_only.py)
    ("linalg.matmul", lambda: torch.linalg.matmul(_M, _N), lambda: _r(_M) @ _r(_N)),
    ("mm", lambda: torch.mm(_M, _N), lambda: torch.mm(_r(_M), _r(_N))),
    ("Tensor.mm", lambda: _M.mm(_N), lambda: _r(_M).mm(_r(_N))),
    ("bmm", lambda: torch.bmm(_B1, _B2), lambda: torch.bmm(_r(_B1), _r(_B2))),
    ("addmm", lambda: torch.addmm(_C, _M, _N), lambda: torch.addmm(_C, _r(_M), _r(_N))),
    (
        "addmm kw",
        lambda: torch.addmm(input=_C, mat1=_M, mat2=_N, beta=0.5),
        lambda: torch.addmm(_C, _r(_M), _r(_N), beta=0.5),
    ),
    ("Tensor.addmm", lambda: _C.addmm(_M, _N), lambda: _C.addmm(_r(_M), _r(_N))),
    ("baddbmm", lambda: torch.baddbmm(_C, _B1, _B2), lambda: torch.baddbmm(_C, _r(_B1), _r(_B2))),
    ("addbmm", lambda: torch.addbmm(_C, _B1, _B2), lambda: torch.addbmm(_C, _r(_B1), _r(_B2))),
    (
        "einsum",
        lambda: torch.einsum("ij,jk->ik", _M, _N),
        lambda: torch.einsum("ij,jk->ik", _r(_M), _r(_N)),
    ),
    (
        "einsum list",
        lambda: torch.einsum("bij,bjk", [_B1, _B2]),
        lambda: torch.einsum("bij,bjk", [_r(_B1), _r(_B2)]),
    ),
    (
        "tensordot",
        lambda: torch.tensordot(_M, _N, dims=1),
        lambda: torch.tensordot(_r(_M), _r(_N), dims=1),
    ),
    ("linear", lambda: F.linear(_M, _N.T, _C[0]), lambda: F.linear(_r(_M), _r(_N.T), _C[0])),
    ("nn.Linear", None, None),
]
MATMUL_CASES = [c for c in MATMUL_CASES if c[1] is not None]


@pytest.mark.parametrize(
    ("name", "call", "rounded"), MATMUL_CASES, ids=[c[0] for c in MATMUL_CASES]
)
def test_each_matmul_op_is_emulated(precision, name, call, rounded):
    native = call()
    expected = rounded()
    assert not torch.equal(native, expected)  # the operands do lose bits
    precision(True)
    with emulate_tf32():
        got = call()
    assert torch.equal(got, expected)
    precision(False)
    with emulate_tf32():
        assert torch.equal(call(), native)  # 'highest': nothing changes


def test_chains_round_every_intermediate_product_as_a_gpu_does(precision):
    # A TF32 GPU runs multi_dot / chain_matmul / 3-operand einsum as a chain of GEMMs,
    # each rounding its operands -- the intermediate product included.
    a, b, c = _M, _N, _C.T
    left = _r(_r(a) @ _r(b)) @ _r(c)
    right = _r(a) @ _r(_r(b) @ _r(c))
    once = torch.linalg.multi_dot([_r(a), _r(b), _r(c)])  # intermediate not rounded
    precision(True)
    with emulate_tf32():
        chained = [
            torch.linalg.multi_dot([a, b, c]),
            torch.einsum("ij,jk,kl->il", a, b, c),
            (a @ b) @ c,
        ]
    for got in chained:
        assert torch.equal(got, left) or torch.equal(got, right)
        assert not torch.equal(got, once)


def test_one_operand_einsum_is_a_reduction_not_a_gemm(precision):
    precision(True)
    with emulate_tf32():
        assert torch.equal(torch.einsum("ij->i", _M), _M.sum(1))
        assert torch.equal(torch.einsum("ii->", _C[:3]), torch.trace(_C[:3]))


def test_autocast_operands_are_not_rounded_twice(precision):
    precision(True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        native = _M @ _N
        with emulate_tf32():
            assert torch.equal(_M @ _N, native)


def test_backward_products_are_emulated_too(precision):
    # Autograd's GEMMs (here grad_a = grad_out @ b.T) reach the same ATen operators.
    a = _M.clone().requires_grad_(True)
    grad_out = torch.randn(_M.shape[0], _N.shape[1], generator=torch.Generator().manual_seed(3))
    precision(True)
    with emulate_tf32():
        (a @ _N).backward(grad_out)
    assert torch.equal(a.grad, _r(grad_out) @ _r(_N.T))
    assert not torch.equal(a.grad, grad_out @ _N.T)


def test_nn_linear_module_is_emulated(precision):
    layer = torch.nn.Linear(5, 3)
    native = layer(_M)
    expected = F.linear(_r(_M), _r(layer.weight), layer.bias)
    precision(True)
    with emulate_tf32(), torch.no_grad():
        assert torch.equal(layer(_M), expected)
    assert not torch.equal(native, expected)


def test_additive_term_stays_float32(precision):
    c = torch.full((1, 1), 1 + 2**-20)
    one = torch.ones(1, 1)
    precision(True)
    with emulate_tf32():
        assert torch.addmm(c, one, one).item() == 2 + 2**-20
        assert F.linear(one, one, c[0]).item() == 2 + 2**-20


def test_vector_products_and_other_ops_untouched(precision):
    x = torch.full((3,), 1 + 2**-11)
    a = torch.full((3, 3), 1 + 2**-11)
    expect_mv, expect_dot, expect_mul = a @ x, x @ x, (a * a).sum()
    precision(True)
    with emulate_tf32():
        assert torch.equal(a @ x, expect_mv)
        assert torch.equal(x @ x, expect_dot)
        assert torch.equal(torch.mv(a, x), expect_mv)
        assert torch.equal((a * a).sum(), expect_mul)
        assert torch.equal(torch.einsum("ij,ij->ij", a, a), a * a)


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16, torch.float16])
def test_other_dtypes_untouched(precision, dtype):
    a = torch.full((4, 4), 1 + 2**-11, dtype=torch.float64).to(dtype)
    native = a @ a
    precision(True)
    with emulate_tf32(force=True):
        assert torch.equal(a @ a, native)
        assert torch.equal(torch.mm(a, a), native)


def test_settings_read_at_each_call(precision):
    a = torch.full((2, 2), 1 + 2**-11)
    native = a @ a
    emulated = _r(a) @ _r(a)
    with emulate_tf32():
        precision(False)
        first = a @ a
        precision(True)
        second = a @ a
        precision(False)
        third = a @ a
    assert torch.equal(first, native) and torch.equal(third, native)
    assert torch.equal(second, emulated)


@pytest.mark.parametrize(
    "switch_on",
    [
        lambda: torch.set_float32_matmul_precision("high"),
        lambda: torch.set_float32_matmul_precision("medium"),
        lambda: setattr(torch.backends.cuda.matmul, "allow_tf32", True),
        lambda: setattr(torch.backends, "fp32_precision", "tf32"),
    ],
    ids=["high", "medium", "legacy allow_tf32", "generic fp32_precision"],
)
def test_every_tf32_knob_counts(precision, switch_on):
    assert not tf32_matmul_enabled()
    switch_on()
    assert tf32_matmul_enabled()
    a = torch.randn(32, 32, generator=torch.Generator().manual_seed(3))
    with emulate_tf32():
        got = a @ a
    torch.set_float32_matmul_precision("highest")
    torch.backends.fp32_precision = "none"
    torch.backends.cuda.matmul.fp32_precision = "none"
    assert torch.equal(got, _r(a) @ _r(a))  # also at 'medium': float32 accumulation


def test_rounding_choice(precision):
    a = torch.tensor([[1024.5]])  # pytorch issue 53635: Ampere gives 1025
    precision(True)
    expected = {"rna": 1025.0, "rne": 1024.0, "rz": 1024.0}
    for rounding, value in expected.items():
        with emulate_tf32(rounding):
            assert (a @ torch.ones(1, 1)).item() == value


def test_nesting_innermost_decides_and_state_restored(precision, monkeypatch):
    a = torch.tensor([[1 + 2**-11]])
    one = torch.ones(1, 1)
    precision(True)
    with emulate_tf32("rna"):
        assert (a @ one).item() == 1 + 2**-10
        with emulate_tf32("rz"):
            assert (a @ one).item() == 1.0
        assert (a @ one).item() == 1 + 2**-10
    assert (a @ one).item() == 1 + 2**-11
    # an inner context that declines (real TF32 claimed, no force) is not overridden
    monkeypatch.setattr(tf32.settings, "has_real_tf32", lambda device: True)
    with emulate_tf32("rz", force=True):
        with emulate_tf32("rna"):
            assert (a @ one).item() == 1 + 2**-11
        assert (a @ one).item() == 1.0
    assert _get_current_function_mode_stack() == []


def test_state_restored_after_exception(precision):
    a = torch.tensor([[1 + 2**-11]])
    precision(True)
    with pytest.raises(RuntimeError, match="boom"), emulate_tf32():
        with emulate_tf32("rz"):
            raise RuntimeError("boom")
    assert _get_current_function_mode_stack() == []
    assert (a @ torch.ones(1, 1)).item() == 1 + 2**-11


def test_real_tf32_left_alone_unless_forced(precision, monkeypatch):
    a = torch.tensor([[1 + 2**-11]])
    one = torch.ones(1, 1)
    precision(True)
    monkeypatch.setattr(tf32.settings, "has_real_tf32", lambda device: True)
    with emulate_tf32():
        assert (a @ one).item() == 1 + 2**-11
    with emulate_tf32(force=True):
        assert (a @ one).item() == 1 + 2**-10


def test_has_real_tf32_on_cpu():
    assert has_real_tf32("cpu") is False
    assert has_real_tf32(torch.device("meta")) is False


def probed_rounding(probe: dict) -> str | None:
    """The one rounding (rna, rne or rz) both operands of the probe's products agree with."""
    m = probe["matches"]
    both = [r for r in tf32.ROUNDINGS if r in m["first_operand"] and r in m["second_operand"]]
    return both[0] if len(both) == 1 else None


@pytest.mark.parametrize("rounding", tf32.ROUNDINGS)
def test_probed_rounding_reads_the_probe(rounding):
    # On the CPU under emulation the probe must name the emulated rounding, each of the three.
    with emulate_tf32(rounding):
        probe = rounding_probe("cpu")
    assert probed_rounding(probe) == rounding
    assert probed_rounding(rounding_probe("cpu")) is None  # float32: no TF32 rounding seen


@pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.get_device_capability() < (8, 0),
    reason="needs an NVIDIA GPU with compute capability >= 8.0 (real TF32)",
)
def test_emulation_matches_real_tf32_on_gpu(precision):
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(256, 256, generator=gen).cuda()
    b = torch.randn(256, 256, generator=gen).cuda()
    # The rounding this GPU applies, as the tf32 recorder's probe measures it (not assumed).
    rounding = probed_rounding(rounding_probe(a.device))
    assert rounding is not None, "the probe saw no single TF32 rounding on this GPU"
    precision(True)
    real = a @ b
    with emulate_tf32(rounding, force=True):
        emulated = a @ b
    exact = a.double() @ b.double()
    # accumulation order differs between kernels; the operand rounding must agree
    assert ((real.double() - emulated.double()).abs().max() / exact.abs().max()) < 1e-6


def test_emulate_rejects_bad_arguments():
    with pytest.raises(ValueError, match="rounding"):
        with emulate_tf32("nearest"):
            pass
    with pytest.raises(TypeError, match="force"):
        with emulate_tf32(force="yes"):
            pass
    assert _get_current_function_mode_stack() == []


# --- the chapter's experiment -------------------------------------------------------------


def test_experiment_3xtf32_within_small_factor_of_fp32():
    res = diag_qtlq_experiment()
    fp32, tf32_err, x3 = res.errors("fp32"), res.errors("tf32"), res.errors("3xtf32")
    assert res.tf32_real is False
    assert x3.max() <= 4 * fp32.max()
    assert x3.median() <= 4 * fp32.median()
    assert tf32_err.median() > 100 * x3.median()
    # TF32's absolute error dwarfs the tail eigenvalues; float32's does not
    tail = slice(-20, None)
    assert (tf32_err[tail] > res.eigenvalues[tail]).any()
    assert (fp32[tail] < res.eigenvalues[tail]).all()


def test_experiment_is_deterministic():
    a, b = diag_qtlq_experiment(n=32), diag_qtlq_experiment(n=32)
    for m in a.estimates:
        assert torch.equal(a.estimates[m], b.estimates[m])


def test_docstring_examples():
    import doctest

    import eigprec_book.chapters.tf32.experiments

    import eigprec.tf32.compensated
    import eigprec.tf32.core
    import eigprec.tf32.emulate
    import eigprec.tf32.rounding
    import eigprec.tf32.settings

    for module in (
        eigprec.tf32.core,
        eigprec.tf32.emulate,
        eigprec.tf32.rounding,
        eigprec.tf32.compensated,
        eigprec.tf32.settings,
        eigprec_book.chapters.tf32.experiments,
    ):
        result = doctest.testmod(module)
        assert result.attempted > 0 and result.failed == 0


def test_one_definition_of_tf32_hardware(monkeypatch):
    assert not is_tf32_capability((7, 5))  # Turing (Colab's T4)
    assert is_tf32_capability((8, 0)) and is_tf32_capability((9, 0))  # Ampere, Hopper
    monkeypatch.setattr(torch.version, "hip", "6.2")
    assert not is_tf32_capability((9, 4))  # a ROCm build: no NVIDIA TF32


def test_unset_rounding_follows_the_environment_variable(monkeypatch):
    # A tie between two TF32 values: 1 + 2**-11 goes up under "rna", down under "rne".
    x = torch.tensor([1 + 2**-11])
    monkeypatch.delenv("EIGPREC_TF32_ROUNDING", raising=False)
    assert eigprec.tf32.default_rounding() == "rna"
    assert round_tf32(x).item() == 1 + 2**-10
    monkeypatch.setenv("EIGPREC_TF32_ROUNDING", "rne")
    assert round_tf32(x).item() == 1.0
    assert round_tf32(x, "rna").item() == 1 + 2**-10  # an explicit rule wins
    a = torch.tensor([[1 + 2**-11]])
    with eigprec.matmul_precision("high"), eigprec.emulate_tf32():
        assert (a @ torch.ones(1, 1)).item() == 1.0
    monkeypatch.setenv("EIGPREC_TF32_ROUNDING", "nearest")
    with pytest.raises(ValueError, match="EIGPREC_TF32_ROUNDING"):
        round_tf32(x)
    with pytest.raises(ValueError, match="EIGPREC_TF32_ROUNDING"):
        eigprec.emulate_tf32()
