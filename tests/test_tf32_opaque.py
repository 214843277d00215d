"""Operators that multiply out of the dispatcher's sight: emulated where they can be rebuilt,
otherwise named as run-but-not-covered (issue 19 item 2, issue 21 item 3)."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F

from eigprec.audit import tf32_audit
from eigprec.precision import matmul_precision
from eigprec.tf32 import NotEmulatedWarning, emulate_tf32, round_tf32


def _x(seed: int, *shape: int, **kw) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), **kw)


def _module(cls, *args, **kw):
    torch.manual_seed(0)  # torch.nn initialises from the global generator
    return cls(*args, **kw)


@pytest.fixture
def rnn_tf32_off():
    old = torch.backends.cudnn.rnn.fp32_precision
    torch.backends.cudnn.rnn.fp32_precision = "ieee"
    yield
    torch.backends.cudnn.rnn.fp32_precision = old


# --- rebuilt and emulated: cdist's matrix-product path, nn.Bilinear, nn.LSTM -------------


def test_cdist_matmul_path_is_emulated_and_audited():
    x1, x2 = _x(1, 40, 6), _x(2, 50, 6)  # > 25 rows: cdist takes the GEMM path
    want = torch.cdist(x1, x2)
    with tf32_audit() as report:
        audited = torch.cdist(x1, x2)
    assert torch.equal(audited, want)  # the audit's rebuild is bit for bit
    assert [r.op for r in report.records] == ["mm"] and not report.not_covered
    with matmul_precision("high"), emulate_tf32():
        emulated = torch.cdist(x1, x2)
    assert not torch.equal(emulated, want)
    assert torch.allclose(emulated, want, rtol=1e-2, atol=1e-2)


def test_bilinear_is_emulated_and_listed_by_the_audit():
    bil = _module(torch.nn.Bilinear, 4, 5, 3)
    x, y = _x(1, 7, 4), _x(2, 7, 5)
    want = bil(x, y)
    with matmul_precision("high"), emulate_tf32():
        got = bil(x, y)
    w = round_tf32(bil.weight.detach())
    ref = torch.einsum("bi,oij,bj->bo", round_tf32(x), w, round_tf32(y)) + bil.bias.detach()
    assert not torch.equal(got, want)
    assert torch.allclose(got, ref, rtol=1e-3, atol=1e-3)
    with tf32_audit() as report:
        assert torch.equal(bil(x, y), want)
    assert report.not_covered["_trilinear"][0] == 1
    assert "_trilinear" in str(report)


def test_lstm_follows_the_cudnn_rnn_switch(rnn_tf32_off):
    lstm = _module(torch.nn.LSTM, 4, 3)
    s = _x(3, 5, 2, 4)
    want = lstm(s)[0]
    with matmul_precision("high"), emulate_tf32():  # matmul on, cuDNN RNN off: float32
        off = lstm(s)[0]
    assert torch.equal(off, want)
    torch.backends.cudnn.rnn.fp32_precision = "tf32"
    with emulate_tf32():  # 'highest' for matmuls, but cuDNN RNN TF32 on: emulated
        on = lstm(s)[0]
        on.sum().backward()  # the rebuilt LSTM is differentiable
    assert not torch.equal(on, want)
    assert torch.allclose(on, want, rtol=1e-2, atol=1e-2)


def test_gru_follows_the_cudnn_rnn_switch_not_the_matmul_switch(rnn_tf32_off):
    gru = _module(torch.nn.GRU, 4, 3)
    s = _x(4, 5, 2, 4)
    want = gru(s)[0]
    with matmul_precision("high"), emulate_tf32():
        assert torch.equal(gru(s)[0], want)
    torch.backends.cudnn.rnn.fp32_precision = "tf32"
    with emulate_tf32():
        assert not torch.equal(gru(s)[0], want)


def test_lstm_is_listed_by_the_audit():
    lstm = _module(torch.nn.LSTM, 4, 3)
    with tf32_audit() as report:
        lstm(_x(3, 5, 2, 4))
    (name,) = report.not_covered
    assert "rnn" in name and "cudnn.rnn" in report.not_covered[name][1]


# --- run but not covered: fused attention, the transformer fast path --------------------


def test_sdpa_forward_and_backward_are_listed():
    q = _x(5, 2, 2, 6, 4, requires_grad=True)
    with tf32_audit() as report:
        F.scaled_dot_product_attention(q, q, q).sum().backward()
    names = set(report.not_covered)
    assert any("attention" in n and "backward" not in n for n in names)
    assert any("attention" in n and "backward" in n for n in names)
    assert all("3xTF32" in note for _, note in report.not_covered.values())
    assert "Run but not covered" in report.to_markdown()
    with matmul_precision("high"), emulate_tf32(), pytest.warns(NotEmulatedWarning):
        F.scaled_dot_product_attention(q, q, q)


def test_transformer_fast_path_is_listed_and_can_be_avoided():
    layer = _module(torch.nn.TransformerEncoderLayer, 8, 2, 16, batch_first=True).eval()
    x = _x(6, 2, 5, 8)
    with torch.no_grad(), tf32_audit() as report:
        layer(x)
    assert "_transformer_encoder_layer_fwd" in report.not_covered
    assert "set_fastpath_enabled" in report.not_covered["_transformer_encoder_layer_fwd"][1]
    assert not report.records
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        with torch.no_grad(), tf32_audit() as report:
            layer(x)
    finally:
        torch.backends.mha.set_fastpath_enabled(True)
    assert report.records and not any("transformer" in n for n in report.not_covered)


def test_not_emulated_warning_once_per_operator_and_block():
    q = _x(7, 1, 1, 4, 4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with matmul_precision("high"), emulate_tf32():
            for _ in range(3):
                F.scaled_dot_product_attention(q, q, q)
    assert sum(issubclass(w.category, NotEmulatedWarning) for w in caught) == 1


def test_sdpa_math_path_is_emulated_and_audited_the_fused_default_stays_float32():
    """Why SDPA is not rebuilt on its math path by default (issue 19b): on a TF32 GPU the
    float32 default is the memory-efficient kernel, whose CUTLASS GEMMs use 3xTF32 (about
    float32 accuracy) whatever the switches, so float32 *is* its emulation. TF32 reaches
    attention only on the math path; selecting that path here runs the same bmm's, which the
    emulator rounds and the audit measures, forward and backward."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q, k, v = (_x(20 + i, 2, 3, 16, 8) for i in range(3))
    fused = F.scaled_dot_product_attention(q, k, v)
    with sdpa_kernel(SDPBackend.MATH):
        math_fp32 = F.scaled_dot_product_attention(q, k, v)
    with matmul_precision("high"), emulate_tf32(), pytest.warns(NotEmulatedWarning):
        assert torch.equal(F.scaled_dot_product_attention(q, k, v), fused)
    with matmul_precision("high"), emulate_tf32(), sdpa_kernel(SDPBackend.MATH):
        math_tf32 = F.scaled_dot_product_attention(q, k, v)
    # the math path's two bmm's, rounded: an error of TF32's size, not float32's
    assert 2.0**-16 < float((math_tf32 - math_fp32).abs().max()) < 2.0**-6
    qg = q.clone().requires_grad_()
    with tf32_audit() as report, sdpa_kernel(SDPBackend.MATH):
        F.scaled_dot_product_attention(qg, k, v).sum().backward()
    assert not report.not_covered
    ops = [(r.op, r.phase == "forward") for r in report.records]
    assert ops.count(("bmm", True)) == 2 and any(not fwd for _, fwd in ops)
