"""SOAP's edge inputs, fourth pass (issue 35, items 10 and 12).

Item 10: a zero-size parameter crashed ``step()`` with ``use_kl_shampoo=True,
eps_mode="relative"`` ("max(): Expected reduction dim…"); every other option handled it.
Decided: every option steps a zero-size parameter (nothing to update; the step counter
advances), next to a non-empty parameter that is stepped as usual.

Item 12: a parameter listed twice in one group was stepped twice per ``step()``. torch
warns for that ("in future, this will cause an error", pytorch issue 40967) and raises
``ValueError`` for a parameter in two groups; for SOAP a second step with the same gradient
is a wrong result, not a style issue, so it is refused as torch refuses the cross-group case:
``ValueError`` at construction or ``add_param_group``, naming the parameter's position.
"""

from __future__ import annotations

import itertools

import pytest
import torch

from eigprec import REKLS, SOAP

_OPTIONS = [
    {},
    {"use_kl_shampoo": True},
    {"use_kl_shampoo": True, "eps_mode": "relative"},
    {"use_kl_shampoo": True, "eps_mode": "relative", "track_diagnostics": True},
    {"use_kl_shampoo": True, "eps_mode": "relative", "eigval_dtype": torch.float64},
    {"use_kl_shampoo": True, "eps_mode": "relative", "factor_matmul": "3xtf32"},
    {"use_kl_shampoo": True, "eps_mode": "relative", "dtype": torch.float64},
    {"use_eigh": True, "use_kl_shampoo": True, "eps_mode": "relative"},
    {"eps_mode": "relative"},
    {"nesterov": True, "max_update_rms": 0.5, "weight_decay_method": "l2"},
    {"power_iter_steps": 0, "track_diagnostics": True},
]


@pytest.mark.parametrize("kw", _OPTIONS, ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()))
@pytest.mark.parametrize("shape", [(0, 3), (3, 0), (0, 0)])
def test_a_zero_size_parameter_steps_under_every_option(kw, shape):
    g = torch.Generator().manual_seed(0)
    empty = torch.nn.Parameter(torch.zeros(shape))
    full = torch.nn.Parameter(torch.randn(4, 3, generator=g))
    opt = SOAP([empty, full], lr=0.1, **kw)
    ref_full = torch.nn.Parameter(full.detach().clone())
    ref = SOAP([ref_full], lr=0.1, **kw)
    for _ in range(3):
        grad = torch.randn(4, 3, generator=g)
        empty.grad, full.grad, ref_full.grad = torch.zeros(shape), grad, grad.clone()
        opt.step()
        ref.step()
    assert opt.state[empty]["step"] == 3
    assert empty.shape == shape
    # The empty parameter does not disturb its neighbour.
    assert torch.equal(full, ref_full)


def test_rekls_steps_a_zero_size_parameter_with_the_relative_floor():
    w = torch.nn.Parameter(torch.zeros(0, 5))
    opt = REKLS([w], lr=0.1, eps_mode="relative", track_diagnostics=True)
    w.grad = torch.zeros(0, 5)
    opt.step()
    assert opt.diagnostics[w]["floor_L"] == pytest.approx(1e-8)  # no eigenvalues: eps


def test_a_parameter_twice_in_one_group_is_refused_at_construction():
    a, b = torch.nn.Parameter(torch.zeros(3, 2)), torch.nn.Parameter(torch.zeros(2, 2))
    for params in ([a, b, a], [a, a]):
        with pytest.raises(ValueError, match=r"duplicate.*parameter 2|parameter \d+.*twice"):
            SOAP(params, lr=0.1)
    with pytest.raises(ValueError, match="twice"):
        REKLS([{"params": [b, b]}], lr=0.1)
    named = [("w", a), ("w2", a)]
    with pytest.raises(ValueError, match="twice"):
        SOAP(named, lr=0.1)


def test_a_parameter_twice_in_an_added_group_is_refused_and_not_added():
    a, b = torch.nn.Parameter(torch.zeros(3, 2)), torch.nn.Parameter(torch.zeros(2, 2))
    opt = SOAP([a], lr=0.1)
    with pytest.raises(ValueError, match="twice"):
        opt.add_param_group({"params": [b, b]})
    assert len(opt.param_groups) == 1


def test_a_parameter_in_two_groups_is_still_torchs_error():
    a = torch.nn.Parameter(torch.zeros(3, 2))
    with pytest.raises(ValueError, match="more than one parameter group"):
        SOAP([{"params": [a]}, {"params": [a]}], lr=0.1)


def test_distinct_parameters_with_equal_values_are_not_duplicates():
    # Identity, not equality: two parameters holding the same numbers are two parameters.
    a, b = (torch.nn.Parameter(torch.ones(2, 2)) for _ in range(2))
    opt = SOAP([a, b], lr=0.1)
    for p in itertools.chain.from_iterable(g["params"] for g in opt.param_groups):
        p.grad = torch.ones(2, 2)
    opt.step()
    assert opt.state[a]["step"] == opt.state[b]["step"] == 1
