"""SOAP's inputs, checkpoint hooks and remaining argument checks (issue 21, items 6, 7, 11, 14).

Decided behaviour: complex, sparse and meta parameters or gradients are refused with
``TypeError`` (at construction, or before a step does any work); named parameters are
accepted as torch ≥ 2.6 optimizers accept them, and a set as a group's params is refused as
torch refuses it; ``load_state_dict`` runs the load pre-hooks first and loads what they
return (the options are checked after them), state-dict post-hooks see ``soap_options``;
an ``eps`` that rounds to 0 in the optimizer's dtype is named as the cause of a refused step.
"""

from __future__ import annotations

import copy
import math
import pickle

import pytest
import torch

from eigprec import SOAP, ema_first_weight
from eigprec._args import check_real
from eigprec.timing import perf_counter_clock, time_interleaved, time_side_by_side


def _opt(params=None, **kw):
    if params is None:
        params = [torch.nn.Parameter(torch.zeros(4, 3))]
    return SOAP(params, lr=0.1, fp32_matmul_prec="highest", qr_fp32_matmul_prec="highest", **kw)


def _stepped(**kw):
    g = torch.Generator().manual_seed(5)
    w = torch.nn.Parameter(torch.randn(4, 3, generator=g))
    opt = _opt([w], **kw)
    for _ in range(2):
        w.grad = torch.randn(4, 3, generator=g)
        opt.step()
    return w, opt


# --- item 6: complex parameters ------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_complex_parameters_are_refused_at_construction(dtype):
    c = torch.nn.Parameter(torch.zeros(3, 3, dtype=dtype))
    with pytest.raises(TypeError, match="dense real parameters only"):
        _opt([c])
    opt = _opt()
    with pytest.raises(TypeError, match="dense real parameters only"):
        opt.add_param_group({"params": [c]})


def test_sparse_or_meta_gradients_are_refused_before_any_work():
    w = torch.nn.Parameter(torch.zeros(4, 3))
    m = torch.nn.Parameter(torch.zeros(4, 3, device="meta"))  # deferred init: no data
    for p, grad in ((w, torch.eye(4, 3).to_sparse()), (m, torch.zeros(4, 3, device="meta"))):
        opt = _opt([p])
        p.grad = grad
        with pytest.raises(TypeError, match="dense real gradient with data"):
            opt.step()
        assert not opt.state[p]


def test_sparse_parameters_are_refused():
    with pytest.raises(TypeError, match="dense real parameters only"):
        _opt([torch.eye(4, 3).to_sparse().requires_grad_()])


# --- item 11: named parameters; item 14: a set of params -----------------------------------


def test_named_parameters_are_accepted_as_torch_does():
    model = torch.nn.Linear(3, 4, bias=False)
    opt = _opt(model.named_parameters())
    assert opt.param_groups[0]["params"] == [model.weight]
    assert opt.param_groups[0]["param_names"] == ["weight"]
    model.weight.grad = torch.ones(4, 3)
    opt.step()
    assert opt.state_dict()["param_groups"][0]["param_names"] == ["weight"]
    grouped = _opt([{"params": list(model.named_parameters())}])
    assert grouped.param_groups[0]["params"] == [model.weight]


@pytest.mark.parametrize("bad", [("weight",), ("weight", "not a tensor"), (1, torch.zeros(2, 2))])
def test_malformed_named_parameters_are_refused(bad):
    with pytest.raises(TypeError, match="2-D parameters only"):
        _opt([bad])


def test_a_set_as_a_groups_params_is_refused_like_torch():
    w = torch.nn.Parameter(torch.zeros(4, 3))
    with pytest.raises(TypeError, match="ordered collections"):
        torch.optim.SGD([{"params": {w}}], lr=0.1)  # torch's rule...
    with pytest.raises(TypeError, match="not a set"):  # ...is SOAP's
        _opt([{"params": {w}}])


# --- item 7: checkpoint hooks ---------------------------------------------------------------


def test_load_pre_hook_result_is_what_is_loaded():
    w, opt = _stepped()
    sd = opt.state_dict()
    target = _opt([torch.nn.Parameter(w.detach().clone())])

    def hook(optimizer, state_dict):
        new = copy.deepcopy(state_dict)
        new["state"][0]["exp_avg"] = torch.full_like(new["state"][0]["exp_avg"], 7.0)
        return new

    target.register_load_state_dict_pre_hook(hook)
    target.load_state_dict(sd)
    p = target.param_groups[0]["params"][0]
    assert torch.equal(target.state[p]["exp_avg"], torch.full((4, 3), 7.0))
    assert not torch.equal(sd["state"][0]["exp_avg"], torch.full((4, 3), 7.0))  # untouched


def test_a_pre_hook_can_migrate_an_old_checkpoint_without_options():
    w, opt = _stepped()
    old = opt.state_dict()
    options = old.pop("soap_options")
    target = _opt([torch.nn.Parameter(w.detach().clone())])
    with pytest.raises(ValueError, match="no 'soap_options'"):
        target.load_state_dict(old)
    target.register_load_state_dict_pre_hook(lambda o, sd: {**sd, "soap_options": options})
    target.load_state_dict(old)
    p = target.param_groups[0]["params"][0]
    assert torch.equal(target.state[p]["L"], opt.state[w]["L"])


def test_option_check_runs_after_the_pre_hooks():
    w, opt = _stepped()
    sd = opt.state_dict()
    target = _opt([torch.nn.Parameter(w.detach().clone())])

    def break_options(optimizer, state_dict):
        state_dict["soap_options"] = {**state_dict["soap_options"], "use_kl_shampoo": True}

    target.register_load_state_dict_pre_hook(break_options)
    with pytest.raises(ValueError, match="use_kl_shampoo"):
        target.load_state_dict(sd)


def test_load_post_hook_runs_once_after_the_dtype_fix_up():
    w, opt = _stepped(dtype=torch.float64)
    target = _opt([torch.nn.Parameter(w.detach().clone())], dtype=torch.float64)
    seen = []
    target.register_load_state_dict_post_hook(
        lambda o: seen.append(o.state[o.param_groups[0]["params"][0]]["L"].dtype)
    )
    target.load_state_dict(opt.state_dict())
    assert seen == [torch.float64]


def test_state_dict_post_hooks_see_soap_options_also_after_copies():
    _, opt = _stepped()
    seen = []
    for o in (opt, copy.deepcopy(opt), pickle.loads(pickle.dumps(opt))):
        o.register_state_dict_post_hook(lambda o, sd: seen.append("soap_options" in sd))
        sd = o.state_dict()
        assert sd["soap_options"]["dtype"] == "float32"
    assert seen == [True, True, True]


# --- item 14: eps that rounds to 0 ------------------------------------------------------------


def test_eps_rounding_to_zero_is_named_not_overflow():
    w = torch.nn.Parameter(torch.zeros(4, 3))
    opt = _opt([w], eps=1e-50)
    w.grad = torch.zeros(4, 3)
    with pytest.raises(ValueError, match="eps=1e-50 rounds to 0 in float32") as info:
        opt.step()
    assert "overflow" not in str(info.value)
    assert not opt.state[w]
    ok = _opt([w], eps=1e-50, dtype=torch.float64)  # representable in float64: a step
    ok.step()
    assert torch.equal(w, torch.zeros(4, 3))


# --- item 14: ema_first_weight, timing and huge numbers --------------------------------------


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ((0.5, True), TypeError),
        ((0.5, 2.5), TypeError),
        ((False, 2), TypeError),
        (("0.5", 2), TypeError),
        ((0.5, 0), ValueError),
        ((math.nan, 1), ValueError),
        ((1.0, 1), ValueError),
    ],
)
def test_ema_first_weight_refuses_bad_arguments(args, error):
    with pytest.raises(error):
        ema_first_weight(*args)


def test_ema_first_weight_still_accepts_numpy_scalars():
    import numpy as np

    assert ema_first_weight(np.float64(0.5), np.int64(1)) == 1.0


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"repeats": 2.5}, TypeError),
        ({"repeats": True}, TypeError),
        ({"repeats": math.nan}, TypeError),
        ({"repeats": 0}, ValueError),
        ({"warmup": -1}, ValueError),
        ({"warmup": 0.5}, TypeError),
    ],
)
def test_time_side_by_side_refuses_bad_counts(kwargs, error):
    with pytest.raises(error):
        time_side_by_side({"f": lambda: None}, **kwargs)


@pytest.mark.parametrize("fns", [[lambda: None], {"f": 3}, {}])
def test_timers_refuse_what_is_not_a_dict_of_callables(fns):
    with pytest.raises((TypeError, ValueError), match=r"fns must be|not callable|candidate"):
        time_side_by_side(fns)
    with pytest.raises((TypeError, ValueError), match=r"fns must be|not callable|candidate"):
        time_interleaved(fns, clock=perf_counter_clock)


def test_time_interleaved_refuses_nan_budget():
    with pytest.raises(ValueError, match="budget_s"):
        time_interleaved({"f": lambda: None}, clock=perf_counter_clock, budget_s=math.nan)


def test_huge_integers_are_out_of_range_not_overflow_errors():
    with pytest.raises(ValueError, match="finite"):
        check_real("lr", 10**400)
    with pytest.raises(ValueError, match="lr"):
        SOAP([torch.nn.Parameter(torch.zeros(2, 2))], lr=10**400)
