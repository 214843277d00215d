"""Remedies that change when or where SOAP preconditions (issue 37, item 3)."""

import doctest
import math

import pytest
import torch
from eigprec_book.chapters.degeneracy import schedule_methods
from eigprec_book.chapters.degeneracy.schedule_methods import (
    DelayedSOAP,
    OneSidedSOAP,
    SkipFirstSOAP,
    clipped_spike,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from eigprec.soap import SOAP

KW = {"use_kl_shampoo": True, "fp32_matmul_prec": "highest", "qr_fp32_matmul_prec": "highest"}


def _grads(shape, steps, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(*shape, generator=gen) for _ in range(steps)]


def _run(cls, grads, **kw):
    w = torch.nn.Parameter(torch.zeros(*grads[0].shape))
    opt = cls([w], lr=0.05, weight_decay=0.0, **KW, **kw)
    out = []
    for g in grads:
        w.grad = g.clone()
        opt.step()
        out.append(w.detach().clone())
    return w, opt, out


def test_docstring_examples_run():
    result = doctest.testmod(schedule_methods)
    assert result.attempted > 0 and result.failed == 0


def test_skip_first_builds_the_factors_but_leaves_parameter_and_moments():
    grads = _grads((6, 4), 3)
    w, opt, out = _run(SkipFirstSOAP, grads[:1])
    _, ref, _ = _run(SOAP, grads[:1])
    assert torch.equal(out[0], torch.zeros(6, 4))
    for key in ("L", "R", "Q_L", "Q_R"):
        assert torch.equal(opt.state[w][key], ref.state[next(iter(ref.state))][key]), key
    assert not opt.state[w]["exp_avg"].any() and not opt.state[w]["exp_avg_sq"].any()
    w, opt, out = _run(SkipFirstSOAP, grads)
    assert out[1].abs().max() > 0
    # The second step's Adam is a first step (bias corrections count from it): its update
    # has unit RMS-per-entry magnitude lr·g/(|g| + eps) in the eigenbasis.
    assert math.isclose(out[1].norm().item(), 0.05 * math.sqrt(24), rel_tol=1e-4)


def test_delayed_start_zero_is_soap_bit_for_bit():
    grads = _grads((6, 4), 5)
    _, _, a = _run(DelayedSOAP, grads, start_step=0)
    _, _, b = _run(SOAP, grads)
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def test_delayed_runs_plain_adam_then_the_eigenbasis():
    grads = _grads((6, 4), 5)
    w, opt, out = _run(DelayedSOAP, grads[:3], start_step=3)
    assert torch.equal(opt.state[w]["Q_L"], torch.eye(6))
    assert torch.equal(opt.state[w]["Q_R"], torch.eye(4))
    v = torch.nn.Parameter(torch.zeros(6, 4))
    adam = torch.optim.Adam([v], lr=0.05, betas=(0.9, 0.95), eps=1e-8)
    for g, got in zip(grads[:3], out, strict=True):
        v.grad = g.clone()
        adam.step()
        torch.testing.assert_close(got, v.detach(), rtol=1e-5, atol=1e-7)
    # The factors took every update meanwhile; the fourth step builds the basis from them.
    assert opt.state[w]["L"].abs().max() > 0
    w.grad = grads[3].clone()
    opt.step()
    L = opt.state[w]["L"].double()
    QL = opt.state[w]["Q_L"].double()
    off = QL.T @ L @ QL
    assert (off - torch.diag(off.diagonal())).abs().max() < 1e-4 * off.abs().max()


def test_delayed_refuses_a_bad_start():
    w = torch.nn.Parameter(torch.zeros(3, 2))
    with pytest.raises(ValueError, match="start_step"):
        DelayedSOAP([w], lr=0.1, start_step=-1)
    with pytest.raises(TypeError, match="start_step"):
        DelayedSOAP([w], lr=0.1, start_step=True)


@pytest.mark.parametrize("shape", [(6, 4), (4, 6), (5, 5)])
def test_one_sided_keeps_only_the_smaller_side(shape):
    grads = _grads(shape, 4)
    w, opt, _ = _run(OneSidedSOAP, grads)
    m, n = shape
    big, small = ("L", "R") if m >= n else ("R", "L")
    st_ = opt.state[w]
    assert not st_[big].any()
    assert torch.equal(st_["Q_" + big], torch.eye(max(m, n) if m != n else m))
    # The kept factor is the bias-corrected EMA of the Gram matrix over the other size.
    beta = 0.95
    ref = torch.zeros_like(st_[small], dtype=torch.float64)
    for t, g in enumerate(grads, start=1):
        g = g.double()
        gram = g.T @ g / m if small == "R" else g @ g.T / n
        b = 1 - (1 - beta) / (1 - beta**t)
        ref = b * ref + (1 - b) * gram
    torch.testing.assert_close(st_[small].double(), ref, rtol=1e-5, atol=1e-6)
    q = st_["Q_" + small].double()
    torch.testing.assert_close(
        q.T @ q, torch.eye(q.shape[0], dtype=torch.float64), atol=1e-5, rtol=0
    )


def test_one_sided_update_is_adam_in_the_small_sides_basis():
    grads = _grads((6, 4), 1)
    w, opt, out = _run(OneSidedSOAP, grads)
    q = opt.state[w]["Q_R"]
    g_rot = grads[0] @ q
    direction = g_rot / (g_rot.abs() + 1e-8)  # Adam's first step
    torch.testing.assert_close(out[0], -0.05 * direction @ q.T, rtol=1e-5, atol=1e-6)


def test_clipped_spike_arithmetic():
    assert clipped_spike(1.0, 0.3) == 1.0
    assert clipped_spike(1000.0, 1.0) == pytest.approx(1.0)  # the whole model: clipped to 1×
    assert clipped_spike(1000.0, 1e-4) == pytest.approx(1000 / math.sqrt(1 - 1e-4 + 100))
    assert clipped_spike(1000.0, 1e-4, headroom=1e6) == 1000.0  # a clip that never acts


@settings(max_examples=60, deadline=None)
@given(
    st.floats(1.0, 1e6),
    st.floats(1e-8, 1.0),
    st.floats(1.0, 100.0),
)
def test_clipped_spike_never_grows_the_spike_and_keeps_at_least_the_clip(spike, share, room):
    out = clipped_spike(spike, share, room)
    assert out <= spike * (1 + 1e-12)
    # The clip never cuts the layer below min(spike, headroom): its share is at most 1.
    assert out >= min(spike, room) * (1 - 1e-9)


@pytest.mark.parametrize(
    "args, err",
    [
        ((0.0, 0.1), ValueError),
        ((10.0, 0.0), ValueError),
        ((10.0, 1.5), ValueError),
        ((10.0, 0.1, 0.5), ValueError),
        ((10.0, "a"), TypeError),
        ((math.nan, 0.1), ValueError),
    ],
)
def test_clipped_spike_refuses_bad_input(args, err):
    with pytest.raises(err):
        clipped_spike(*args)
