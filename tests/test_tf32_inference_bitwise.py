"""Under inference_mode, emulate_tf32 and tf32_audit leave non-product results bit for bit
(issue 21 item 2): composite operators must run the C++ kernel eager mode runs, not torch's
Python decompositions written for tracing.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from eigprec.audit import tf32_audit
from eigprec.tf32 import emulate_tf32


def _x(seed: int, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _gru(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)  # nn.GRU initialises from the global generator
    return torch.nn.GRU(4, 3)


COMPOSITES = {
    "trilinear": lambda s, x: F.interpolate(x, scale_factor=s, mode="trilinear"),
    "trilinear_ac": lambda s, x: F.interpolate(
        x, scale_factor=s, mode="trilinear", align_corners=True
    ),
    "bilinear": lambda s, x: F.interpolate(x[:, :, 0], scale_factor=s, mode="bilinear"),
    "bicubic": lambda s, x: F.interpolate(x[:, :, 0], scale_factor=s, mode="bicubic"),
    "linear": lambda s, x: F.interpolate(x[:, :, 0, 0], scale_factor=s, mode="linear"),
    "nearest": lambda s, x: F.interpolate(x[:, :, 0], scale_factor=s, mode="nearest"),
    "area": lambda s, x: F.interpolate(x[:, :, 0], scale_factor=s, mode="area"),
    "layer_norm": lambda s, x: F.layer_norm(x * s, x.shape[-1:]),
    "group_norm": lambda s, x: F.group_norm(x * s, 2),
    "softmax": lambda s, x: torch.softmax(x * s, -1),
    "log_softmax": lambda s, x: F.log_softmax(x * s, -1),
    "gelu_tanh": lambda s, x: F.gelu(x * s, approximate="tanh"),
    "pdist": lambda s, x: F.pdist(x.flatten(1) * s),
    "cosine_similarity": lambda s, x: F.cosine_similarity(x * s, x.flip(-1), dim=-1),
    "norm": lambda s, x: torch.linalg.vector_norm(x * s, dim=(-2, -1)),
    "var_mean": lambda s, x: torch.var_mean(x * s, dim=-1)[0],
    "logsumexp": lambda s, x: torch.logsumexp(x * s, -1),
}


@pytest.mark.parametrize("name", sorted(COMPOSITES))
@settings(max_examples=4, deadline=None)
@given(seed=st.integers(0, 2**16), scale=st.sampled_from([1.3, 1.7, 2.0, 0.6]))
def test_composites_are_bitwise_with_tf32_off(name, seed, scale):
    call = COMPOSITES[name]
    x = _x(seed, 1, 4, 5, 6, 7)
    with torch.inference_mode():
        want = call(scale, x)
        with emulate_tf32():
            emulated = call(scale, x)
        with tf32_audit():
            audited = call(scale, x)
    assert torch.equal(emulated, want)
    assert torch.equal(audited, want)


@pytest.fixture
def rnn_tf32_off():
    old = torch.backends.cudnn.rnn.fp32_precision  # GRUs follow cuDNN's RNN switch
    torch.backends.cudnn.rnn.fp32_precision = "ieee"
    yield
    torch.backends.cudnn.rnn.fp32_precision = old


@pytest.mark.parametrize("seed", range(3))
def test_gru_is_bitwise_with_tf32_off(seed, rnn_tf32_off):
    gru, s = _gru(seed), _x(seed, 5, 2, 4)
    with torch.inference_mode():
        want = gru(s)[0]
        with emulate_tf32():
            emulated = gru(s)[0]
        with tf32_audit():
            audited = gru(s)[0]
    assert torch.equal(emulated, want) and torch.equal(audited, want)
