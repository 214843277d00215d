"""A SOAP step is all or nothing, also when the *parameter* would overflow (issue 35, item 4).

Before: ``SOAP([p64, p32], lr=1e39)`` raised torch's "value cannot be converted to type
float without overflow" from inside the commit, after p64 had been updated and p32 multiplied
by the weight-decay factor; ``weight_decay=1e300`` silently wrote ±inf parameters. Decided:
the new value of every parameter is computed and checked before any is written; a learning
rate beyond a parameter's dtype, or a new parameter value that is not finite, is refused
with a ``ValueError`` that names the parameter and the hyperparameter, and leaves parameters,
state and step counters as they were.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eigprec import REKLS, SOAP

FAST = settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
_METHODS = ("decoupled", "independent", "l2", "palm")


def _snapshot(opt, params):
    return [
        (
            p.detach().clone(),
            {k: (v.clone() if torch.is_tensor(v) else v) for k, v in opt.state[p].items()},
        )
        for p in params
    ]


def _assert_same(opt, params, snap):
    for p, (value, state) in zip(params, snap, strict=True):
        assert torch.equal(p.detach(), value)
        assert set(opt.state[p]) == set(state)
        for k, v in state.items():
            assert torch.equal(opt.state[p][k], v) if torch.is_tensor(v) else opt.state[p][k] == v


def _params(dtypes, seed=0):
    g = torch.Generator().manual_seed(seed)
    params = [torch.nn.Parameter(torch.randn(3, 3, generator=g).to(d)) for d in dtypes]
    return params, g


def test_a_learning_rate_beyond_float32_is_refused_before_any_parameter_changes():
    (p64, p32), g = _params((torch.float64, torch.float32))
    opt = SOAP([p64, p32], lr=1e39)
    p64.grad, p32.grad = torch.randn(3, 3, generator=g).double(), torch.randn(3, 3, generator=g)
    snap = _snapshot(opt, [p64, p32])
    with pytest.raises(ValueError, match=r"lr=1e\+39.*float32|float32.*lr=1e\+39") as info:
        opt.step()
    assert "parameter 1 of param group 0" in str(info.value)
    _assert_same(opt, [p64, p32], snap)
    assert opt.state[p64] == {} and opt.state[p32] == {}


@pytest.mark.parametrize("cls", [SOAP, REKLS])
@pytest.mark.parametrize("later", [False, True], ids=["first-step", "later-step"])
def test_weight_decay_that_overflows_a_parameter_is_refused_not_written(cls, later):
    (p64, p32), g = _params((torch.float64, torch.float32), seed=1)
    opt = cls([p64, p32], lr=1e-3, weight_decay=1e300)
    if later:
        opt.param_groups[0]["weight_decay"] = 0.0
        p64.grad, p32.grad = torch.randn(3, 3, generator=g).double(), torch.randn(3, 3)
        opt.step()
        opt.param_groups[0]["weight_decay"] = 1e300
    p64.grad, p32.grad = torch.randn(3, 3, generator=g).double(), torch.randn(3, 3)
    snap = _snapshot(opt, [p64, p32])
    with pytest.raises(ValueError, match="weight_decay") as info:
        opt.step()
    assert "parameter 1 of param group 0" in str(info.value)
    assert "Nothing was updated" in str(info.value)
    _assert_same(opt, [p64, p32], snap)
    assert all(torch.isfinite(p).all() for p in (p64, p32))


def test_a_refused_parameter_in_a_later_group_leaves_the_first_group_untouched():
    (p64, p32), g = _params((torch.float64, torch.float32), seed=2)
    opt = SOAP([{"params": [p64]}, {"params": [p32], "weight_decay": 1e300}], lr=1e-3)
    p64.grad, p32.grad = torch.randn(3, 3, generator=g).double(), torch.randn(3, 3)
    with pytest.raises(ValueError, match="group 1"):
        opt.step()
    assert opt.state[p64] == {} and opt.state[p32] == {}


_HUGE = (0.0, 1e-3, 1.0, 1e30, 1e39, 1e300)


@FAST
@given(
    lr=st.sampled_from(_HUGE),
    weight_decay=st.sampled_from(_HUGE),
    method=st.sampled_from(_METHODS),
    param_dtypes=st.lists(
        st.sampled_from((torch.float32, torch.float64, torch.bfloat16, torch.float16)),
        min_size=1,
        max_size=3,
    ),
    opt_dtype=st.sampled_from((torch.float32, torch.float64)),
    kl=st.booleans(),
)
def test_every_step_either_writes_finite_parameters_or_changes_nothing(
    lr, weight_decay, method, param_dtypes, opt_dtype, kl
):
    params, g = _params(param_dtypes, seed=len(param_dtypes))
    opt = SOAP(
        params,
        lr=lr,
        weight_decay=weight_decay,
        weight_decay_method=method,
        dtype=opt_dtype,
        use_kl_shampoo=kl,
    )
    for p in params:
        p.grad = torch.randn(3, 3, generator=g).to(p.dtype)
    snap = _snapshot(opt, params)
    try:
        opt.step()
    except ValueError as err:
        assert "Nothing was updated" in str(err)
        _assert_same(opt, params, snap)
        return
    for p in params:
        assert torch.isfinite(p).all(), (p.dtype, lr, weight_decay, method)
        assert opt.state[p]["step"] == 1


@pytest.mark.parametrize("method", _METHODS)
def test_the_committed_parameter_is_the_same_arithmetic_as_before(method):
    # The parameter is now computed aside and copied in; it must still be p·decay − lr·update
    # with the update the committed state gives (to float32 rounding of the recomputation).
    g = torch.Generator().manual_seed(3)
    w = torch.nn.Parameter(torch.randn(5, 4, generator=g))
    opt = SOAP([w], lr=0.05, weight_decay=0.1, weight_decay_method=method)
    for _ in range(3):
        w.grad = torch.randn(5, 4, generator=g)
        before = w.detach().clone()
        lr, wd = 0.05, 0.1
        decay = {"decoupled": 1 - lr * wd, "independent": 1 - wd, "palm": 1 - lr * lr * wd}
        opt.step()
        # Recover the update from the state the step committed and redo the arithmetic.
        state = opt.state[w]
        beta1, beta2 = opt.param_groups[0]["betas"]
        t = state["step"]
        m, v = state["exp_avg"], state["exp_avg_sq"]
        direction = (m / (1 - beta1**t)) / ((v / (1 - beta2**t)).sqrt() + 1e-8)
        update = state["Q_L"] @ direction @ state["Q_R"].T
        expected = before.clone()
        factor = decay.get(method, 1.0)
        if factor != 1.0:
            expected.mul_(factor)
        expected.add_(update, alpha=-lr)
        assert torch.allclose(w.detach(), expected, rtol=0, atol=1e-6)
        assert math.isfinite(float(w.detach().abs().max()))
