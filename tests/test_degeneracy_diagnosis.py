"""The spike diagnosis of the degeneracy chapter, measured on a 32×16 parameter."""

import pytest
import torch
from eigprec_book.chapters.degeneracy.diagnosis import (
    factor_history,
    hidden_damage,
    null_half,
    null_half_turn,
    remedy_diagnosis,
    spectrum_ratio,
    spike_perturbation,
    trace_spike,
)
from eigprec_book.chapters.degeneracy.kl_methods import (
    ClampedEigvalSOAP,
    GramStartSOAP,
    kl_methods_floor,
)
from eigprec_book.chapters.degeneracy.spike import SpikeConfig, spike_experiment
from eigprec_book.chapters.degeneracy.training import Setting
from hypothesis import given
from hypothesis import strategies as st

from eigprec.soap import SOAP

SHAPE = (32, 16)
_CACHE: dict[str, object] = {}


def trace(method, prec="highest", dtype=torch.float32, remedy="none"):
    setting = Setting(method, prec, dtype=dtype, remedy=remedy)
    if setting.label not in _CACHE:
        _CACHE[setting.label] = trace_spike(setting, shape=SHAPE)
    return _CACHE[setting.label]


def test_trace_reproduces_the_chapter_spike_experiment():
    run = spike_experiment(SpikeConfig("REKLS", "high", shape=SHAPE, steps=56))
    tr = trace("REKLS", "high")
    assert torch.equal(run.eig_R, tr.eig_R)
    assert torch.equal(run.eig_L, tr.eig_L)


def test_r_is_held_up_not_decaying_in_float64():
    h = factor_history(trace("REKLS", dtype=torch.float64))
    assert 0.8 < h["R min ratio"] < 1.25  # smallest eigenvalue of R stays put
    assert h["R max ratio"] < 0.2  # while the top one decays with β
    assert h["L max ratio"] < 0.01


def test_null_half_is_tiny_in_float64_and_rounding_noise_in_float32():
    exact = null_half(trace("REKLS", dtype=torch.float64))
    assert exact["clamped"] == 0  # the floor eps = 1e-8 is not what bites
    assert 1e-8 < exact["null min"] <= exact["null max"] < 1e-6
    assert exact["weight max"] > 1e7
    assert exact["R jump"] > 1e4
    single = null_half(trace("REKLS", "highest"))
    assert single["clamped"] > 0  # float32 estimates of ~5e-8 under a ~1e6 top are noise
    assert abs(single["null min"]) > 100 * exact["null max"]


def test_float32_r_has_a_cliff_against_float64():
    ratio, worst = spectrum_ratio(trace("REKLS"), trace("REKLS", dtype=torch.float64), 51)
    assert worst > 100
    assert ratio.max() > 1 and ratio.min() < 1e-2  # some too large, others far too small
    with pytest.raises(ValueError, match="factor"):
        spectrum_ratio(trace("REKLS"), trace("REKLS"), 51, factor="Q")
    with pytest.raises(IndexError):
        spectrum_ratio(trace("REKLS"), trace("REKLS"), 99)


def test_top8_angle_hides_the_update_blow_up():
    ref = trace("REKLS", dtype=torch.float64)
    rows = hidden_damage([(trace("REKLS"), ref), (trace("REKLS", "high"), ref)])
    highest, high = rows
    assert highest["top-8 angle"] < 1.0  # the angle says 'highest' is fine ...
    assert highest["update RMS"] > 3 * highest["reference RMS"]  # ... the update says not
    assert high["top-8 angle"] > 45 and high["update RMS"] > highest["update RMS"]


def test_eigenvalue_clamp_fixes_the_update_at_tf32():
    ref = trace("REKLS", dtype=torch.float64, remedy="eigenvalue clamp")
    (row,) = hidden_damage([(trace("REKLS", "high", remedy="eigenvalue clamp"), ref)])
    assert row["update RMS"] == pytest.approx(row["reference RMS"], rel=0.1)
    assert row["R ratio"] < 3


def test_gram_first_step_removes_the_tiny_null_half_of_l():
    plain = trace("REKLS", dtype=torch.float64)
    gram = trace("REKLS", dtype=torch.float64, remedy="Gram first step")
    assert plain.eig_L[49, -1] / plain.eig_L[49, 0] < 1e-10
    assert gram.eig_L[49, -1] / gram.eig_L[49, 0] > 1e-5


def test_spike_barely_moves_l_in_float64():
    p = spike_perturbation(trace("REKLS", dtype=torch.float64), step=50)
    assert p["E/L"] < 1e-6  # the rel. change ≈ 1 − β is the EMA's decay, not a rotation
    assert p["rel change"] == pytest.approx(0.057, abs=0.005)
    assert p["dk bound"] < 1e-2
    with pytest.raises(KeyError, match="kept no factors"):
        spike_perturbation(trace("REKLS", dtype=torch.float64), step=10)


def test_null_half_turn_reports_both_halves():
    turn = null_half_turn(trace("REKLS", dtype=torch.float64))
    assert turn["top half"] < 1e-3 < turn["null half"]


def test_after_the_spike_float32_redraws_the_null_half_and_its_update_blows_up():
    exact, single = trace("REKLS", dtype=torch.float64), trace("REKLS")
    after = range(51, 56)
    assert null_half_turn(exact, after)["null half"] < 0.1  # fixed by the spike in float64
    assert null_half_turn(single, after)["null half"] > 30  # redrawn every step in float32
    _, null = single.update_rms_halves[51].tolist()
    exact_top, exact_null = exact.update_rms_halves[51].tolist()
    assert null > 3 * exact_null
    assert exact_top == pytest.approx(exact_null, rel=0.3)
    with pytest.raises(IndexError):
        null_half_turn(trace("REKLS", dtype=torch.float64), steps=[0])


def test_remedy_diagnosis_pairs_each_run_with_its_reference():
    runs = [Setting("REKLS", "highest"), Setting("REKLS", "high", remedy="relative eps")]
    d = remedy_diagnosis(settings=runs, steps=53, shape=(8, 4))
    assert sorted(d.traces) == [
        "REKLS float64",
        "REKLS float64 + relative eps",
        "REKLS high + relative eps",
        "REKLS highest",
    ]
    rows = {r["run"]: r for r in d.rows}
    assert rows["REKLS float64"]["R ratio"] == 1.0
    assert "REKLS float64 + relative eps" in d.traces
    assert (
        rows["REKLS high + relative eps"]["reference RMS"]
        == d.traces["REKLS float64 + relative eps"].update_rms[51].item()
    )
    with pytest.raises(ValueError, match="spike_step"):
        remedy_diagnosis(steps=51)


def test_gram_first_step_factors_and_later_steps():
    gen = torch.Generator().manual_seed(0)
    g0, g1 = torch.randn(6, 3, generator=gen), torch.randn(6, 3, generator=gen)
    w = torch.nn.Parameter(torch.zeros(6, 3, dtype=torch.float64))
    opt = GramStartSOAP([w], lr=0.1, use_kl_shampoo=True, dtype=torch.float64)
    w.grad = g0.double()
    opt.step()
    assert torch.allclose(opt.state[w]["L"], w.grad @ w.grad.T / 3)
    assert torch.allclose(opt.state[w]["R"], w.grad.T @ w.grad / 6)
    # From the second step on it is SOAP, state for state.
    w2 = torch.nn.Parameter(w.detach().clone())
    twin = SOAP([w2], lr=0.1, use_kl_shampoo=True, dtype=torch.float64)
    twin.state[w2] = {k: (v.clone() if torch.is_tensor(v) else v) for k, v in opt.state[w].items()}
    w.grad, w2.grad = g1.double(), g1.double()
    opt.step()
    twin.step()
    assert torch.equal(w, w2)


def test_clamped_soap_floors_only_the_whitening():
    w = torch.nn.Parameter(torch.zeros(4, 2, dtype=torch.float64))
    opt = ClampedEigvalSOAP([w], lr=0.1, use_kl_shampoo=True, dtype=torch.float64)
    w.grad = torch.ones(4, 2, dtype=torch.float64)
    opt.step()
    # Zero factors: eigenvalues floored at 1/10² instead of eps, so L = G·(100/n)·Gᵀ.
    assert opt.state[w]["L"][0, 0].item() == pytest.approx(100.0)
    assert opt._approx_eigvals(torch.zeros(4, 4, dtype=torch.float64), torch.eye(4)).sum() == 0


@given(st.integers(min_value=1, max_value=10**6))
def test_kl_methods_floor_is_bounded_and_monotone(size):
    floor = kl_methods_floor(size)
    assert 4000.0**-2 <= floor <= 10.0**-2
    assert kl_methods_floor(size + 1) <= floor


@given(st.integers(max_value=0))
def test_kl_methods_floor_rejects_empty_sizes(size):
    with pytest.raises(ValueError, match="size"):
        kl_methods_floor(size)
