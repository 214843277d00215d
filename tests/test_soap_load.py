"""SOAP checkpoints are checked at load, not at the next step (issue 35, items 9 and 12).

Before: the state of a (4, 3) parameter loaded into a SOAP over a (5, 3) parameter, and the
next ``step()`` failed with "The size of tensor a (4) must match …"; a checkpoint with NaN in
``L`` loaded into a float64 REKLS, and the next step said "L, R would overflow float64 … or
use dtype=torch.float64" of an optimizer that is float64. Decided: ``load_state_dict``
checks every parameter's state (its keys, shapes, a real floating dtype, finite entries and
an integer step) before loading any, and raises ``ValueError`` naming the parameter, the
key and what is wrong; a refused load leaves the optimizer's state as it was.
"""

from __future__ import annotations

import math

import pytest
import torch

from eigprec import REKLS, SOAP


def _stepped(shape=(4, 3), cls=SOAP, dtype=torch.float32, steps=2, **kw):
    g = torch.Generator().manual_seed(sum(shape))
    w = torch.nn.Parameter(torch.randn(shape, generator=g, dtype=dtype))
    opt = cls([w], lr=0.1, dtype=dtype, **kw)
    for _ in range(steps):
        w.grad = torch.randn(shape, generator=g, dtype=dtype)
        opt.step()
    return w, opt


def test_state_of_another_shape_is_refused_at_load_naming_the_parameter():
    _, opt = _stepped((4, 3))
    q = torch.nn.Parameter(torch.zeros(5, 3))
    other = SOAP([q], lr=0.1)
    with pytest.raises(ValueError, match=r"parameter 0 of param group 0, shape \(5, 3\)") as info:
        other.load_state_dict(opt.state_dict())
    assert "(4, 3)" in str(info.value)  # what the checkpoint holds
    assert other.state[q] == {}


def test_a_later_parameters_bad_state_leaves_every_state_as_it_was():
    g = torch.Generator().manual_seed(0)
    a, b = torch.nn.Parameter(torch.randn(3, 3)), torch.nn.Parameter(torch.randn(4, 2))
    opt = SOAP([a, b], lr=0.1)
    a.grad, b.grad = torch.randn(3, 3, generator=g), torch.randn(4, 2, generator=g)
    opt.step()
    sd = opt.state_dict()
    a2, b2 = torch.nn.Parameter(a.detach().clone()), torch.nn.Parameter(torch.zeros(4, 3))
    target = SOAP([a2, b2], lr=0.1)
    a2.grad, b2.grad = a.grad.clone(), torch.randn(4, 3, generator=g)
    target.step()
    before = {k: v.clone() if torch.is_tensor(v) else v for k, v in target.state[a2].items()}
    with pytest.raises(ValueError, match="parameter 1 of param group 0"):
        target.load_state_dict(sd)
    for k, v in before.items():
        assert (
            torch.equal(target.state[a2][k], v) if torch.is_tensor(v) else target.state[a2][k] == v
        )


@pytest.mark.parametrize("key", ["L", "R", "Q_L", "exp_avg", "exp_avg_sq"])
@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_non_finite_state_is_refused_at_load_without_the_dtype_advice(key, bad):
    w, opt = _stepped(cls=REKLS, dtype=torch.float64)
    sd = opt.state_dict()
    sd["state"][0][key][0, 0] = bad
    q = torch.nn.Parameter(w.detach().clone())
    other = REKLS([q], lr=0.1, dtype=torch.float64)
    with pytest.raises(ValueError, match=rf"'{key}'.*(NaN|inf)") as info:
        other.load_state_dict(sd)
    assert "parameter 0 of param group 0" in str(info.value)
    assert "use dtype=torch.float64" not in str(info.value)
    assert other.state[q] == {}


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (lambda s: s.pop("R"), "missing 'R'"),
        (lambda s: s.update(L=s["L"][:, :2]), "'L'.*shape"),
        (lambda s: s.update(Q_R=s["Q_R"].to(torch.complex64)), "'Q_R'.*real floating"),
        (lambda s: s.update(exp_avg=s["exp_avg"].to(torch.int64)), "'exp_avg'.*real floating"),
        (lambda s: s.update(L=[[1.0]]), "'L'.*tensor"),
        (lambda s: s.update(step=-1), "'step'"),
        (lambda s: s.update(step=1.5), "'step'"),
        (lambda s: s.update(step=True), "'step'"),
    ],
    ids=["missing", "shape", "complex", "integer", "not-a-tensor", "negative", "float", "bool"],
)
def test_malformed_state_is_refused_at_load(change, match):
    w, opt = _stepped()
    sd = opt.state_dict()
    change(sd["state"][0])
    q = torch.nn.Parameter(w.detach().clone())
    other = SOAP([q], lr=0.1)
    with pytest.raises(ValueError, match=match):
        other.load_state_dict(sd)
    assert other.state[q] == {}


@pytest.mark.parametrize("shape", [(4, 3), (1, 1), (0, 3)])
def test_well_formed_state_still_loads_and_resumes_exactly(shape):
    w, opt = _stepped(shape, use_kl_shampoo=True)
    q = torch.nn.Parameter(w.detach().clone())
    other = SOAP([q], lr=0.1, use_kl_shampoo=True)
    other.load_state_dict(opt.state_dict())
    g = torch.ones(shape)
    w.grad, q.grad = g, g.clone()
    opt.step()
    other.step()
    assert torch.equal(w, q)
    assert other.state[q]["step"] == 3


def test_a_group_size_mismatch_is_still_torchs_error():
    _, opt = _stepped()
    a, b = torch.nn.Parameter(torch.zeros(4, 3)), torch.nn.Parameter(torch.zeros(4, 3))
    with pytest.raises(ValueError, match="doesn't match the size"):
        SOAP([a, b], lr=0.1).load_state_dict(opt.state_dict())


# --- issue 47, item 8: the saved groups' hyperparameters ----------------------------------
# Before: lr=nan, betas=(0.9, 1.5) or eps=-1 in a saved group loaded, and a group without
# shampoo_beta loaded too; the next step raised (a ValueError, or KeyError: 'shampoo_beta')
# with the valid groups' hyperparameters already overwritten by the checkpoint's. Decided:
# the saved groups are checked as the constructor checks its arguments, before anything is
# loaded; the refusal names the group and the hyperparameter.


def _two_groups():
    a, b = torch.nn.Parameter(torch.zeros(3, 2)), torch.nn.Parameter(torch.zeros(4, 2))
    opt = SOAP([{"params": [a], "lr": 0.5}, {"params": [b]}], lr=0.1)
    a.grad, b.grad = torch.ones(3, 2), torch.ones(4, 2)
    opt.step()
    return opt


@pytest.mark.parametrize(
    ("key", "value", "match"),
    [
        ("lr", math.nan, "param group 1: lr"),
        ("betas", (0.9, 1.5), r"param group 1: betas\[1\]"),
        ("eps", -1.0, "param group 1: eps"),
        ("weight_decay", "0.1", "param group 1: weight_decay"),
        ("shampoo_beta", None, "param group 1 .*'shampoo_beta'"),
    ],
)
def test_bad_or_missing_saved_hyperparameters_are_refused_before_loading(key, value, match):
    opt = _two_groups()
    sd = opt.state_dict()
    sd["param_groups"][0]["lr"] = 0.25  # a valid change in the first group
    if value is None:
        del sd["param_groups"][1][key]
    else:
        sd["param_groups"][1][key] = value
    target = _two_groups()
    groups_before = [{k: v for k, v in g.items() if k != "params"} for g in target.param_groups]
    state_before = {p: dict(s) for p, s in target.state.items()}
    with pytest.raises((ValueError, TypeError), match=f"state_dict: {match}"):
        target.load_state_dict(sd)
    after = [{k: v for k, v in g.items() if k != "params"} for g in target.param_groups]
    assert after == groups_before  # the first group kept lr 0.5
    assert all(
        target.state[p] is not None and target.state[p].keys() == s.keys()
        for p, s in state_before.items()
    )
    for p, s in state_before.items():
        assert all(target.state[p][k] is v for k, v in s.items())  # the same objects
    target.step()  # still steps


def test_valid_saved_hyperparameters_still_load_as_python_numbers():
    opt = _two_groups()
    sd = opt.state_dict()
    sd["param_groups"][1]["lr"] = 0.3
    target = _two_groups()
    target.load_state_dict(sd)
    assert target.param_groups[1]["lr"] == 0.3 and target.param_groups[0]["lr"] == 0.5
    target.step()
