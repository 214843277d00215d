"""eigprec.tf32 under misuse (issue 12: items 1, 2, 7, 13, 16, 17; issue 10: items 4, 7)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
import warnings

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from eigprec import matmul_precision
from eigprec.tf32 import (
    BackwardAfterExitWarning,
    emulate_tf32,
    has_real_tf32,
    matmul_3xtf32,
    round_tf32,
    split_tf32,
    tf32_matmul_enabled,
)

FMAX = torch.finfo(torch.float32).max
MAX_TF32 = (2 - 2**-10) * 2.0**127
INF = float("inf")

_G = torch.Generator().manual_seed(21)
_M = torch.randn(4, 5, generator=_G)
_N = torch.randn(5, 3, generator=_G)
_B1 = torch.randn(2, 4, 5, generator=_G)
_V = torch.randn(5, generator=_G)


def _r(t):
    return round_tf32(t)


@pytest.fixture
def tf32_on():
    torch.set_float32_matmul_precision("high")
    yield
    torch.set_float32_matmul_precision("highest")
    torch.backends.cuda.matmul.fp32_precision = "none"
    torch.backends.mkldnn.matmul.fp32_precision = "none"


# --- item 1: inference_mode ------------------------------------------------------------

_LINEAR = torch.nn.Linear(5, 3)
CASES = [
    ("@", lambda: _M @ _N, lambda: _r(_M) @ _r(_N)),
    ("matmul", lambda: torch.matmul(_M, _N), lambda: _r(_M) @ _r(_N)),
    ("einsum", lambda: torch.einsum("ij,jk->ik", _M, _N), lambda: _r(_M) @ _r(_N)),
    ("linear", lambda: F.linear(_M, _N.T), lambda: _r(_M) @ _r(_N)),
    (
        "nn.Linear",
        lambda: _LINEAR(_M),
        lambda: F.linear(_r(_M), _r(_LINEAR.weight.detach()), _LINEAR.bias.detach()),
    ),
    ("batched @", lambda: _B1 @ _N, lambda: _r(_B1) @ _r(_N)),
    (
        "multi_dot",
        lambda: torch.linalg.multi_dot([_M, _N, _N.T]),
        lambda: _r(_r(_M) @ _r(_N)) @ _r(_N.T),
    ),
    ("tensordot", lambda: torch.tensordot(_M, _N, dims=1), lambda: _r(_M) @ _r(_N)),
]


@pytest.mark.parametrize(("name", "call", "expected"), CASES, ids=[c[0] for c in CASES])
def test_emulated_under_inference_mode(tf32_on, name, call, expected):
    with torch.no_grad():
        want = expected()
        native = call()
    assert not torch.equal(native, want)
    with emulate_tf32(), torch.inference_mode():
        got = call()
    assert torch.equal(got, want)
    with torch.inference_mode(), emulate_tf32():  # either nesting order
        assert torch.equal(call(), want)


def test_inference_mode_leaves_vector_products_alone(tf32_on):
    native = _M @ _V
    with emulate_tf32(), torch.inference_mode():
        assert torch.equal(_M @ _V, native)
        assert torch.equal(torch.mv(_M, _V), native)


# --- item 2: backward after exit, worker threads ----------------------------------------


def test_backward_inside_block_is_emulated_without_warning(tf32_on):
    a = _M.clone().requires_grad_(True)
    g = torch.randn(4, 3, generator=torch.Generator().manual_seed(1))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with emulate_tf32():
            (a @ _N).backward(g)
    assert torch.equal(a.grad, _r(g) @ _r(_N.T))


def test_backward_after_exit_is_not_emulated_and_warns(tf32_on):
    a = _M.clone().requires_grad_(True)
    g = torch.randn(4, 3, generator=torch.Generator().manual_seed(1))
    with emulate_tf32():
        out = a @ _N
    with pytest.warns(BackwardAfterExitWarning, match="NOT emulated"):
        out.backward(g)
    assert torch.equal(a.grad, g @ _N.T)  # the documented semantics: native products


def test_graph_without_emulated_products_does_not_warn():
    a = _M.clone().requires_grad_(True)
    with emulate_tf32():  # 'highest': nothing is emulated, nothing to warn about
        out = a @ _N
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out.sum().backward()


def test_worker_threads_need_their_own_block(tf32_on):
    results = {}

    def plain():
        results["plain"] = _M @ _N

    def own_block():
        with emulate_tf32():
            results["own"] = _M @ _N

    with emulate_tf32():
        for target in (plain, own_block):
            t = threading.Thread(target=target)
            t.start()
            t.join(10)
    assert torch.equal(results["plain"], _M @ _N)  # documented: thread-local
    assert torch.equal(results["own"], _r(_M) @ _r(_N))


# --- item 13: another thread cannot switch emulation off ---------------------------------


@pytest.mark.parametrize("how", ["block", "direct setter"])
def test_other_threads_precision_block_waits_for_emulation(how):
    inside = threading.Event()
    log = []

    def emulating():
        if how == "block":
            ctx = matmul_precision("high")
        else:  # no block: emulate_tf32 itself holds the precision
            torch.set_float32_matmul_precision("high")
            ctx = contextlib.nullcontext()
        with ctx, emulate_tf32():
            inside.set()
            for _ in range(20):
                log.append(torch.equal(_M @ _N, _r(_M) @ _r(_N)))
                time.sleep(0.01)
        log.append("left")

    def switching():
        inside.wait(10)
        with matmul_precision("highest"):
            log.append("highest")

    threads = [threading.Thread(target=emulating), threading.Thread(target=switching)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    torch.set_float32_matmul_precision("highest")
    torch.backends.cuda.matmul.fp32_precision = "none"
    torch.backends.mkldnn.matmul.fp32_precision = "none"
    assert log[:20] == [True] * 20 and log[20:] == ["left", "highest"]


# --- item 7: huge and infinite operands ----------------------------------------------------


def test_split_of_huge_and_infinite_values():
    x = torch.tensor([FMAX, -FMAX, 3.4013e38, INF, -INF, float("nan"), MAX_TF32])
    big, small = split_tf32(x)
    assert big[:3].abs().eq(MAX_TF32).all()
    assert torch.isfinite(small[:3]).all()
    assert big[3:5].tolist() == [INF, -INF] and small[3:5].tolist() == [0.0, 0.0]
    assert big[5].isnan() and small[5].isnan()
    assert big[6].item() == MAX_TF32 and small[6].item() == 0.0
    exact = big[:3].double() + small[:3].double()
    assert ((exact - x[:3].double()).abs() <= x[:3].double().abs() * 2.0**-23).all()


def test_3xtf32_of_huge_and_infinite_operands_matches_float32():
    a = torch.tensor([[FMAX, 1.0], [INF, 1.0], [-INF, 2.0], [3.4013e38, 0.0]])
    b = torch.tensor([[0.5], [1.0]])
    got, want = matmul_3xtf32(a, b), a @ b
    assert torch.equal(torch.isinf(got), torch.isinf(want))
    assert torch.equal(torch.isnan(got), torch.isnan(want))
    finite = torch.isfinite(want)
    assert ((got - want)[finite].abs() <= want[finite].abs() * 2.0**-22).all()
    assert got[1, 0] == INF and got[2, 0] == -INF
    # inf * 0 is NaN in float32 as well
    assert matmul_3xtf32(torch.tensor([[INF]]), torch.tensor([[0.0]])).isnan().all()


def test_split_rejects_non_float32():
    with pytest.raises(TypeError, match="float32"):
        split_tf32(torch.ones(2, dtype=torch.float64))


# --- issue 10, item 7: the split's bound is 2**-23 -----------------------------------------

normal_range = st.floats(
    width=32, allow_nan=False, allow_infinity=False, min_value=2.0**-114, max_value=MAX_TF32
)
top_range = st.floats(width=32, min_value=MAX_TF32, max_value=FMAX)


@settings(max_examples=500, deadline=None)
@given(normal_range, st.booleans())
def test_split_loses_at_most_2_to_minus_23(v, negative):
    v = -v if negative else v
    big, small = split_tf32(torch.tensor([v]))
    err = abs(big.double().item() + small.double().item() - v)
    assert err <= abs(v) * 2.0**-23


@settings(max_examples=200, deadline=None)
@given(top_range)
def test_split_beyond_the_largest_tf32_value_loses_at_most_2_to_105(v):
    # big is pinned at MAX_TF32; the remainder (< 2**117) rounds with spacing 2**106
    big, small = split_tf32(torch.tensor([v]))
    assert big.item() == MAX_TF32
    assert abs(big.double().item() + small.double().item() - v) <= 2.0**105


def test_split_bound_2_to_minus_23_is_attained():
    # x = 1 + 2**-11 + 2**-22 + 2**-23: small = round(2**-11 + 2**-22 + 2**-23) drops 2**-23
    x = torch.tensor([1 + 2**-11 + 2**-22 + 2**-23])
    big, small = split_tf32(x)
    err = abs(big.double().item() + small.double().item() - x.double().item())
    assert err == 2.0**-23
    assert err > x.item() * 2.0**-24  # so 2**-23 (relative, up to x's size) is tight


# --- item 16 ---------------------------------------------------------------------------------


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without CUDA")
def test_has_real_tf32_cuda_without_cuda_is_false():
    assert has_real_tf32("cuda") is False
    assert has_real_tf32("cuda:0") is False


# --- item 17: torch.func ---------------------------------------------------------------------


def test_vmap_grad_and_jvp_of_round_tf32():
    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(2))
    x[0, 0] = float("nan")
    out = torch.func.vmap(round_tf32)(x)
    assert torch.equal(out[1:], round_tf32(x[1:])) and out[0, 0].isnan()
    out_rne = torch.func.vmap(lambda r: round_tf32(r, "rne"))(x[1:])
    assert torch.equal(out_rne, round_tf32(x[1:], "rne"))
    w = torch.tensor([2.0, 3.0, 5.0, 7.0])
    grad = torch.func.grad(lambda r: (round_tf32(r) * w).sum())(x[1])
    assert torch.equal(grad, w)  # straight through
    per_row = torch.func.vmap(torch.func.grad(lambda r: (round_tf32(r) * w).sum()))(x[1:])
    assert torch.equal(per_row, w.expand(2, 4))
    _, tangent = torch.func.jvp(round_tf32, (x[1],), (w,))
    assert torch.equal(tangent, w)
    # The batch dimension anywhere, nested vmaps, and a transform inside vmap: the same
    # values on every torch the package supports (torch 2.11 lacks a batching rule for
    # the bit reinterpretation, so round_tf32 brings its own).
    y = x[1:].reshape(2, 2, 2)
    assert torch.equal(torch.func.vmap(round_tf32, in_dims=2)(y), round_tf32(y).movedim(2, 0))
    nested = torch.func.vmap(torch.func.vmap(lambda r: round_tf32(r, "rz")), in_dims=1)(y)
    assert torch.equal(nested, round_tf32(y, "rz").movedim(1, 0))
    jvps = torch.func.vmap(lambda r: torch.func.jvp(round_tf32, (r,), (w,)))(x[1:])
    assert torch.equal(jvps[0], round_tf32(x[1:])) and torch.equal(jvps[1], w.expand(2, 4))


# --- issue 10, item 4: which knobs do what on this torch --------------------------------------


@pytest.mark.skipif(
    not hasattr(torch.backends.cuda.matmul, "fp32_precision"), reason="torch >= 2.9 API"
)
def test_new_api_alone_makes_legacy_getters_raise_on_this_torch():
    try:
        torch.backends.cuda.matmul.fp32_precision = "tf32"
        assert tf32_matmul_enabled()
        with pytest.raises(RuntimeError, match="mix of the legacy and new"):
            torch.get_float32_matmul_precision()
        with pytest.raises(RuntimeError, match="mix of the legacy and new"):
            torch.backends.cuda.matmul.allow_tf32  # noqa: B018
    finally:
        torch.set_float32_matmul_precision("highest")
        torch.backends.cuda.matmul.fp32_precision = "none"
        torch.backends.mkldnn.matmul.fp32_precision = "none"
    torch.get_float32_matmul_precision()  # a legacy setter made them answer again


@pytest.mark.parametrize(("value", "start"), [("1", "high"), ("0", "highest")])
def test_cublas_override_env_sets_the_starting_precision(value, start):
    code = (
        "import torch, eigprec; "
        "print(torch.get_float32_matmul_precision(), eigprec.tf32_matmul_enabled())"
    )
    env = {"TORCH_ALLOW_TF32_CUBLAS_OVERRIDE": value, "PATH": "/usr/bin:/bin"}
    env["PYTHONPATH"] = os.environ.get("PYTHONPATH", "")
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == [start, str(start == "high")]


# --- issue 21 item 4: custom autograd.Function and reentrant checkpointing ----------------


class _MyMatmul(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a @ b

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        return g @ b.T, a.T @ g


def _custom(a):
    return _MyMatmul.apply(a, _N)


def _checkpointed(a):
    from torch.utils.checkpoint import checkpoint

    return checkpoint(lambda x: torch.tanh(x @ _N), a, use_reentrant=True)


@pytest.mark.parametrize("forward", [_custom, _checkpointed], ids=["Function", "reentrant"])
def test_backward_after_exit_warns_for_functions_run_without_grad(tf32_on, forward):
    a = _M.clone().requires_grad_(True)
    with emulate_tf32():
        out = forward(a)
    with pytest.warns(BackwardAfterExitWarning, match="NOT emulated"):
        out.sum().backward()


@pytest.mark.parametrize("forward", [_custom, _checkpointed], ids=["Function", "reentrant"])
def test_backward_inside_block_does_not_warn_for_functions(tf32_on, forward):
    a = _M.clone().requires_grad_(True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", BackwardAfterExitWarning)
        with emulate_tf32():
            forward(a).sum().backward()
