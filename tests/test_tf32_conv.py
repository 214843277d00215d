"""emulate_tf32 on convolutions (cuDNN's TF32 path) and the products it leaves alone."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from eigprec.tf32 import emulate_tf32, round_tf32

_G = torch.Generator().manual_seed(31)
X1 = torch.randn(2, 3, 9, generator=_G)
W1 = torch.randn(4, 3, 3, generator=_G)
X2 = torch.randn(2, 3, 7, 6, generator=_G)
W2 = torch.randn(5, 3, 3, 2, generator=_G)
B2 = torch.randn(5, generator=_G)


def _r(t):
    return round_tf32(t)


@pytest.fixture(autouse=True)
def _restore_switches():
    saved = torch.backends.cudnn.allow_tf32
    yield
    torch.backends.cudnn.allow_tf32 = saved
    torch.set_float32_matmul_precision("highest")
    torch.backends.cuda.matmul.fp32_precision = "none"
    torch.backends.mkldnn.matmul.fp32_precision = "none"


def test_cudnn_tf32_is_on_by_default_even_at_highest():
    assert torch.backends.cudnn.allow_tf32 is True
    assert torch.get_float32_matmul_precision() == "highest"


def test_known_answer_conv1d():
    x = torch.full((1, 1, 4), 1 + 2**-11)
    w = torch.ones(1, 1, 2)
    assert F.conv1d(x, w).flatten().tolist() == [2 + 2**-10] * 3
    with emulate_tf32():  # default settings: cuDNN would use TF32
        assert F.conv1d(x, w).flatten().tolist() == [2 + 2**-9] * 3
    with emulate_tf32("rz"):
        assert F.conv1d(x, w).flatten().tolist() == [2.0] * 3


@pytest.mark.parametrize(
    ("name", "call", "manual"),
    [
        (
            "conv1d",
            lambda: F.conv1d(X1, W1, padding=1),
            lambda: F.conv1d(_r(X1), _r(W1), padding=1),
        ),
        (
            "conv2d bias stride",
            lambda: F.conv2d(X2, W2, B2, stride=(2, 1)),
            lambda: F.conv2d(_r(X2), _r(W2), B2, stride=(2, 1)),
        ),
        (
            "conv_transpose2d",
            lambda: F.conv_transpose2d(X2, W2.transpose(0, 1)),
            lambda: F.conv_transpose2d(_r(X2), _r(W2.transpose(0, 1))),
        ),
        (
            "grouped conv2d",
            lambda: F.conv2d(X2, W2[:3, :1], groups=3),
            lambda: F.conv2d(_r(X2), _r(W2[:3, :1]), groups=3),
        ),
    ],
)
def test_conv_equals_conv_of_rounded_operands(name, call, manual):
    native, expected = call(), manual()
    assert not torch.equal(native, expected)
    with emulate_tf32():
        assert torch.equal(call(), expected)
    with emulate_tf32(), torch.inference_mode():
        assert torch.equal(call(), expected)


def test_bias_stays_float32():
    x = torch.ones(1, 1, 1, 1)
    b = torch.tensor([2**-20])
    with emulate_tf32():
        assert F.conv2d(x, torch.ones(1, 1, 1, 1), b).item() == 1 + 2**-20


def test_backward_rounds_operands_and_keeps_bias_gradient_exact():
    x = X2.clone().requires_grad_(True)
    w = W2.clone().requires_grad_(True)
    b = B2.clone().requires_grad_(True)
    g = torch.randn(2, 5, 5, 5, generator=torch.Generator().manual_seed(4))
    g[0, 0, 0, 0] = 1 + 2**-11  # a bias gradient that TF32 rounding would change
    with emulate_tf32():
        F.conv2d(x, w, b).backward(g)
    want_x = torch.nn.grad.conv2d_input(x.shape, _r(W2), _r(g))
    want_w = torch.nn.grad.conv2d_weight(_r(X2), w.shape, _r(g))
    assert torch.equal(x.grad, want_x)
    assert torch.equal(w.grad, want_w)
    b_native = B2.clone().requires_grad_(True)
    F.conv2d(X2, W2, b_native).backward(g)
    assert torch.equal(b.grad, b_native.grad)  # the same float32 sum, no rounding
    assert (b.grad - g.sum((0, 2, 3))).abs().max() < 1e-5
    assert (b.grad - _r(g).sum((0, 2, 3))).abs().max() > 1e-5
    assert not torch.equal(x.grad, torch.nn.grad.conv2d_input(x.shape, W2, g))


def test_known_answer_conv_backward():
    x = torch.full((1, 1, 3), 1 + 2**-11, requires_grad=True)
    w = torch.full((1, 1, 1), 1 + 2**-11, requires_grad=True)
    with emulate_tf32():
        F.conv1d(x, w).sum().backward()
    # d/dw = sum of rounded x times rounded ones; d/dx = rounded w
    assert w.grad.item() == 3 * (1 + 2**-10)
    assert x.grad.flatten().tolist() == [1 + 2**-10] * 3


def test_cudnn_switch_and_explicit_argument():
    native = F.conv1d(X1, W1)
    rounded = F.conv1d(_r(X1), _r(W1))
    torch.backends.cudnn.allow_tf32 = False
    with emulate_tf32():
        assert torch.equal(F.conv1d(X1, W1), native)
    with emulate_tf32(convolutions=True):
        assert torch.equal(F.conv1d(X1, W1), rounded)
    torch.backends.cudnn.allow_tf32 = True
    with emulate_tf32(convolutions=False):
        assert torch.equal(F.conv1d(X1, W1), native)
    torch.backends.cudnn.conv.fp32_precision = "ieee"  # the new API's spelling
    with emulate_tf32():
        assert torch.equal(F.conv1d(X1, W1), native)


def test_conv_and_matmul_switches_are_independent():
    a = torch.full((2, 2), 1 + 2**-11)
    native_mm, native_conv = a @ a, F.conv1d(X1, W1)
    with emulate_tf32():  # 'highest': matmul not rounded; cuDNN default: conv rounded
        assert torch.equal(a @ a, native_mm)
        assert torch.equal(F.conv1d(X1, W1), F.conv1d(_r(X1), _r(W1)))
        assert not torch.equal(F.conv1d(X1, W1), native_conv)


def test_rejects_bad_convolutions_argument():
    with pytest.raises(TypeError, match="convolutions"):
        with emulate_tf32(convolutions="yes"):
            pass


def test_float64_and_bfloat16_convs_untouched():
    for dtype in (torch.float64, torch.bfloat16):
        x, w = X1.to(dtype), W1.to(dtype)
        native = F.conv1d(x, w)
        with emulate_tf32(convolutions=True):
            assert torch.equal(F.conv1d(x, w), native)


# --- matrix-vector products stay out of TF32 (PyTorch's NoTF32Guard for gemv) ------------


def test_matrix_vector_products_are_not_rounded_even_at_high():
    # PyTorch runs gemv (mv, addmv, matrix @ vector) and dot without TF32 on a GPU.
    a = torch.full((3, 3), 1 + 2**-11)
    v = torch.full((3,), 1 + 2**-11)
    c = torch.full((3,), 2**-20)
    expect = {
        "mv": torch.mv(a, v),
        "addmv": torch.addmv(c, a, v),
        "matrix @ vector": a @ v,
        "dot": v @ v,
    }
    torch.set_float32_matmul_precision("high")
    with emulate_tf32():
        got = {
            "mv": torch.mv(a, v),
            "addmv": torch.addmv(c, a, v),
            "matrix @ vector": a @ v,
            "dot": v @ v,
        }
        # vector @ matrix is a one-row GEMM in ATen, but float32 on the measured H100
        # (book/data/tf32_gpu.json, coverage.vecmat) and H200 (issue 34 item 3)
        got["vector @ matrix"] = v @ a
    expect["vector @ matrix"] = v @ a
    for name, value in expect.items():
        assert torch.equal(got[name], value), name
    assert not torch.equal(v @ a, _r(v) @ _r(a))  # (rounding would have changed it)
