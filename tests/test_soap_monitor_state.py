"""SOAPMonitor on other optimizers, and on state that is replaced or removed.

Issue 46, item 5: the monitor accepted only eigprec's SOAP classes. Decided: it reads any
optimizer whose per-parameter state holds the Kronecker factors and their bases under
``"L"``, ``"R"``, ``"Q_L"``, ``"Q_R"`` (emerging-optimizers' SOAP, or an object with a
compatible ``.state`` and ``.param_groups``), and refuses with ``TypeError``, naming the
keys, one whose state lacks them.

Issue 47, item 11: after ``opt.load_state_dict(checkpoint)`` (a rollback after a spike) and
one ordinary step the monitor compared the new factors with the ones it saw before the
rollback and flagged "R changed by 1.27e+05 of its norm"; a parameter that left the
optimizer stayed alive in the monitor with copies of its factors. Decided: a load (torch's
load-state-dict post-hook) or a step counter that went back starts the parameter's history
afresh (``rel_change`` NaN, as at its first check); parameters no longer in the optimizer
are dropped at the next check, and the monitor holds none alive; :meth:`reset` forgets all.
"""

from __future__ import annotations

import copy
import gc
import math
import weakref

import pytest
import torch

from eigprec import REKLS, SOAP, SOAPMonitor, current_matmul_precision, matmul_precision


def _grads(shape, steps, seed=0, spike_at=None):
    g = torch.Generator().manual_seed(seed)
    out = [torch.randn(shape, generator=g) for _ in range(steps)]
    if spike_at is not None:
        out[spike_at] = out[spike_at] * 1e4
    return out


def _run(opt, w, grads):
    for grad in grads:
        w.grad = grad.clone()
        opt.step()


# --- issue 47, item 11: replaced and removed state ----------------------------------------


def test_a_rollback_by_load_state_dict_starts_the_history_afresh():
    w = torch.nn.Parameter(torch.zeros(8, 4))
    opt = REKLS([w], lr=0.1, fp32_matmul_prec="highest")
    monitor = SOAPMonitor(opt, rel_change_limit=0.5)
    grads = _grads((8, 4), 12, spike_at=6)
    _run(opt, w, grads[:6])
    checkpoint = copy.deepcopy(opt.state_dict())
    _run(opt, w, grads[6:9])  # the spike, then two steps
    monitor.check()
    opt.load_state_dict(checkpoint)  # roll back to before the spike...
    _run(opt, w, grads[9:12])  # ...and step on to the same step counter as at the check
    (sig,) = monitor.check()
    assert sig.step == 9
    assert math.isnan(sig.L.rel_change) and math.isnan(sig.R.rel_change)
    assert not sig.flagged, sig.reasons
    w.grad = grads[0].clone()
    opt.step()
    (again,) = monitor.check()  # the history after the rollback is kept
    assert 0 < again.R.rel_change < 0.5


def test_a_step_counter_that_went_back_starts_the_history_afresh():
    # An optimizer without torch's hooks: the step counter says the state was replaced.
    opt = _Plain((4, 3))
    monitor = SOAPMonitor(opt, rel_change_limit=0.1)
    monitor.check()
    (p,) = opt.param_groups[0]["params"]
    opt.state[p] = {**opt.state[p], "step": 1, "R": 50 * opt.state[p]["R"]}
    (sig,) = monitor.check()
    assert math.isnan(sig.R.rel_change) and not sig.flagged


def test_a_parameter_that_leaves_the_optimizer_is_dropped_at_the_next_check():
    a, w = torch.nn.Parameter(torch.zeros(3, 2)), torch.nn.Parameter(torch.zeros(300, 300))
    opt = SOAP([a, w], lr=0.1, fp32_matmul_prec="highest")
    monitor = SOAPMonitor(opt, spectra="full_rank")
    a.grad, w.grad = torch.ones(3, 2), torch.eye(300)
    opt.step()
    assert [s.param for s in monitor.check()] == [a, w]
    opt.param_groups[0]["params"] = [a]  # w leaves the optimizer, but lives on
    del opt.state[w]
    (only,) = monitor.check()
    assert only.param is a
    # Back in the optimizer, it is a parameter seen for the first time.
    opt.add_param_group({"params": [w]})
    w.grad = torch.eye(300)
    opt.step()
    assert math.isnan(monitor.check()[1].L.rel_change)


def test_a_parameter_that_leaves_the_optimizer_is_not_kept_alive():
    # No check between its removal and its end: the monitor must not be what keeps it.
    a, w = torch.nn.Parameter(torch.zeros(3, 2)), torch.nn.Parameter(torch.zeros(300, 300))
    opt = SOAP([a, w], lr=0.1)
    monitor = SOAPMonitor(opt)
    a.grad, w.grad = torch.ones(3, 2), torch.eye(300)
    opt.step()
    monitor.check()
    opt.param_groups[0]["params"] = [a]
    del opt.state[w]
    gone = weakref.ref(w)
    del w
    gc.collect()
    assert gone() is None
    (only,) = monitor.check()
    assert only.param is a


def test_reset_forgets_every_previous_factor():
    w = torch.nn.Parameter(torch.zeros(5, 3))
    opt = SOAP([w], lr=0.1, fp32_matmul_prec="highest")
    monitor = SOAPMonitor(opt)
    for grad in _grads((5, 3), 2):
        w.grad = grad
        opt.step()
        (sig,) = monitor.check()
    assert not math.isnan(sig.L.rel_change)
    assert monitor.reset() is None
    (sig,) = monitor.check()
    assert math.isnan(sig.L.rel_change) and math.isnan(sig.R.rel_change)


# --- issue 46, item 5: any optimizer with SOAP's factors ----------------------------------


class _Plain:
    """Only what the monitor reads: ``.state`` and ``.param_groups``."""

    def __init__(self, shape, seed=0):
        g = torch.Generator().manual_seed(seed)
        p = torch.zeros(shape)
        x = torch.randn(shape, generator=g)
        L, R = x @ x.T, x.T @ x
        self.param_groups = [{"params": [p]}]
        self.state = {
            p: {
                "L": L,
                "R": R,
                "Q_L": torch.linalg.eigh(L).eigenvectors,
                "Q_R": torch.linalg.eigh(R).eigenvectors,
                "step": 3,
            }
        }


def test_a_plain_object_with_compatible_state_is_monitored():
    opt = _Plain((5, 3))
    monitor = SOAPMonitor(opt)
    (sig,) = monitor.check()
    assert sig.step == 3 and not sig.flagged
    assert sig.R.eig_min_ratio > 0 and sig.R.negative == 0
    # No "eps" in the group: nothing is clamped but what is negative.
    assert sig.L.clamped == sig.L.negative
    (p,) = opt.param_groups[0]["params"]
    opt.state[p]["R"] = -opt.state[p]["R"]
    (bad,) = monitor.check()
    assert bad.flagged and any(r.startswith("R is not positive") for r in bad.reasons)
    del opt.state[p]["step"]
    (no_step,) = monitor.check()
    assert no_step.step is None


@pytest.mark.parametrize("missing", ["Q_L", "R"])
def test_state_without_the_factors_is_refused_naming_them(missing):
    opt = _Plain((4, 3))
    (p,) = opt.param_groups[0]["params"]
    del opt.state[p][missing]
    with pytest.raises(TypeError, match=f"lacks '{missing}'"):
        SOAPMonitor(opt)
    fine = _Plain((4, 3))
    monitor = SOAPMonitor(fine)  # its state lacks a key only after construction
    del fine.state[fine.param_groups[0]["params"][0]][missing]
    with pytest.raises(TypeError, match=f"lacks '{missing}'"):
        monitor.check()


def test_factors_of_the_wrong_shape_are_refused_naming_them():
    opt = _Plain((4, 3))
    (p,) = opt.param_groups[0]["params"]
    opt.state[p]["Q_R"] = torch.eye(4)
    with pytest.raises(ValueError, match=r"'Q_R'.*\(4, 4\).*\(3, 3\)"):
        SOAPMonitor(opt)


def test_torch_optimizers_and_other_objects_are_refused():
    w = torch.nn.Parameter(torch.zeros(3, 2))
    sgd = torch.optim.SGD([w], lr=0.1)  # no state at all yet, and never the factors
    with pytest.raises(TypeError, match=r"SGD.*'L', 'R', 'Q_L', 'Q_R'"):
        SOAPMonitor(sgd)
    adam = torch.optim.Adam([w], lr=0.1)
    w.grad = torch.ones(3, 2)
    adam.step()
    with pytest.raises(TypeError, match="Adam"):
        SOAPMonitor(adam)
    for other in (None, object(), {"state": {}, "param_groups": []}):
        with pytest.raises(TypeError, match=r"\.state.*\.param_groups"):
            SOAPMonitor(other)


def test_emerging_optimizers_soap_is_monitored_as_ours(emerging_soap_lib):
    emerging_soap = emerging_soap_lib.SOAP
    kw = dict(
        lr=0.1,
        weight_decay=0.0,
        use_kl_shampoo=True,
        use_eigh=True,
        fp32_matmul_prec="highest",
        qr_fp32_matmul_prec="highest",
    )
    ours_w, theirs_w = torch.nn.Parameter(torch.zeros(8, 4)), torch.nn.Parameter(torch.zeros(8, 4))
    # The library restores precision with the legacy setter, which rewrites torch ≥ 2.9's
    # fp32_precision attributes; eigprec's context puts them back exactly.
    with matmul_precision(current_matmul_precision()):
        ours, theirs = SOAP([ours_w], **kw), emerging_soap([theirs_w], **kw)
        mine, other = SOAPMonitor(ours), SOAPMonitor(theirs)
        assert other.check() == []  # nothing stepped: no state yet
        for grad in _grads((8, 4), 4):
            _run(ours, ours_w, [grad])
            _run(theirs, theirs_w, [grad])
            (a,), (b,) = mine.check(), other.check()
            assert (a.step, a.flagged, b.flagged) == (b.step, False, False)
            for side in ("L", "R"):
                x, y = getattr(a, side), getattr(b, side)
                assert (x.negative, x.clamped) == (y.negative, y.clamped)
                assert x.eig_min_ratio == pytest.approx(y.eig_min_ratio, rel=1e-3, abs=1e-6)
        theirs.state[theirs_w]["R"] = -theirs.state[theirs_w]["R"]
        (bad,) = other.check()
    assert bad.flagged and any(r.startswith("R is not positive") for r in bad.reasons)
