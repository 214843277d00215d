import math

import pytest
import torch
from eigprec_book.chapters.degeneracy.experiments import eigvec_rotation_experiment
from eigprec_book.chapters.degeneracy.spike import SpikeConfig, spike_angle_table, spike_experiment
from eigprec_book.helpers import printed_bound
from hypothesis import given
from hypothesis import strategies as st

from eigprec.soap import ema_first_weight
from eigprec.tf32 import tf32_mode


def run_spike(*args, **kw):
    """``spike_experiment`` of ``SpikeConfig(*args, **kw)``."""
    return spike_experiment(SpikeConfig(*args, **kw))


# -- rotation against ‖E‖/gap -----------------------------------------------------------------


def test_rotations_respect_davis_kahan_and_the_cluster_is_stable():
    r = eigvec_rotation_experiment(n=12, ratios=[1e-3, 0.1, 1.0, 10.0], trials=4, seed=1)
    assert r.top1.shape == r.cluster.shape == (4, 4)
    assert bool((r.top1 <= r.top1_bound[:, None] + 1e-7).all())
    assert bool((r.cluster <= r.cluster_bound[:, None] + 1e-7).all())
    # At ‖E‖ = 10 × gap the top eigenvector is arbitrary inside the pair, the pair is not.
    assert r.top1[-1].max() > 20.0
    assert r.cluster[-1].max() < 1.0  # DK: asin(0.01 / 0.49) ≈ 1.2°


def test_rotation_experiment_is_deterministic_and_checks_input():
    a = eigvec_rotation_experiment(n=6, ratios=[0.5], trials=2, seed=3)
    b = eigvec_rotation_experiment(n=6, ratios=[0.5], trials=2, seed=3)
    assert torch.equal(a.top1, b.top1)
    with pytest.raises(ValueError, match="n must be"):
        eigvec_rotation_experiment(n=2)
    with pytest.raises(ValueError, match="gap"):
        eigvec_rotation_experiment(gap=0.6, cluster_gap=0.5)
    with pytest.raises(ValueError, match="ratios"):
        eigvec_rotation_experiment(ratios=[-1.0])


# -- the spike experiment ---------------------------------------------------------------------

SHORT = {"steps": 56}  # the spike is at step 50; 56 steps reach offset +6


def _max_after_spike(run):
    return run.top1_angles(49)[50:].max().item()


@pytest.mark.parametrize("method", ["SOAP", "REKLS"])
def test_tf32_rotates_the_basis_and_float32_float64_relative_eps_do_not(method):
    tf32 = run_spike(method, "high", **SHORT)
    assert tf32.tf32 == "emulated"
    assert _max_after_spike(tf32) > 80.0
    # Before the spike nothing moves, even at TF32: the damage is the spike's.
    assert tf32.top1_angles(49)[40:50].max() < 0.2
    for run in (
        run_spike(method, "highest", **SHORT),
        run_spike(method, "highest", dtype=torch.float64, **SHORT),
        run_spike(method, "high", eps_mode="relative", **SHORT),
    ):
        assert run.tf32 in ("none", "emulated")
        assert _max_after_spike(run) < 0.2, run.label


def test_spike_run_records_consistent_diagnostics():
    run = run_spike("REKLS", "highest", shape=(12, 6), steps=8, spike_step=4)
    assert run.Q_L.shape == (8, 12, 12)
    assert run.eig_L.shape == (8, 12) and run.eig_R.shape == (8, 6)
    assert run.approx_L.shape == (8, 12) and run.approx_R.shape == (8, 6)
    assert run.clamped_L[0] == 12 and run.clamped_R[0] == 6  # zero factors at step 0
    assert run.rel_change_L[0] == 1.0
    assert bool((run.eig_L[:, :-1] >= run.eig_L[:, 1:]).all())  # descending
    assert run.seconds > 0
    assert run.label == "REKLS highest"
    assert sorted(run.factors) == [3, 4, 5]  # around the spike by default
    L4, R4 = run.factors[4]
    assert (L4.shape, R4.shape, L4.dtype) == ((12, 12), (6, 6), torch.float32)
    assert torch.allclose(torch.linalg.eigvalsh(R4.double()).flip(0), run.eig_R[4])


def test_spike_experiment_is_deterministic():
    a = run_spike("SOAP", "high", shape=(16, 8), steps=12, spike_step=6)
    b = run_spike("SOAP", "high", shape=(16, 8), steps=12, spike_step=6)
    assert torch.equal(a.Q_L, b.Q_L)
    assert torch.equal(a.eig_R, b.eig_R)


def test_angle_table_rows_and_offsets():
    run = run_spike("REKLS", "highest", shape=(16, 8), steps=20, spike_step=10)
    rows = spike_angle_table([run], ref_step=9, offsets=(1, 2, 5), k=3)
    assert [r["quantity"] for r in rows] == ["top-1", "top-3 subspace"]
    assert list(rows[0])[2:] == ["-5", "-2", "-1", "+1", "+2", "+5"]
    assert all(0.0 <= v <= 90.0 for r in rows for k, v in r.items() if k[0] in "+-")
    with pytest.raises(ValueError, match="outside"):
        spike_angle_table([run], ref_step=9, offsets=(15,))


def test_pre_spike_factor_is_the_decayed_first_update():
    # KL-Shampoo's first step whitens with eps-clamped zero factors, so L starts ~1/eps too
    # large and then only decays: the "steady state" is a transient, not an equilibrium.
    run = run_spike("REKLS", "highest", dtype=torch.float64, steps=50)
    ratio = run.eig_L[49, :8] / run.eig_L[0, :8]
    assert torch.allclose(ratio, torch.full_like(ratio, ema_first_weight(0.95, 50)), rtol=1e-3)
    # Pure decay by the bias-corrected beta: ‖ΔL‖/‖L‖ = (1 − β_t)/β_t (float64 state, so the
    # recorded factors must be copies, not views of the optimizer's in-place state).
    beta = 1 - 0.05 / (1 - 0.95**50)
    assert run.rel_change_L[49].item() == pytest.approx((1 - beta) / beta, rel=1e-2)


def test_bad_arguments():
    with pytest.raises(ValueError, match="method"):
        run_spike("Adam")
    with pytest.raises(ValueError, match="steps"):
        run_spike(steps=0)
    with pytest.raises(ValueError, match="implementation"):
        run_spike(implementation="other")
    with pytest.raises(ValueError, match="shape"):
        run_spike(shape=(0, 3))
    with pytest.raises(ValueError, match="shampoo_beta"):
        ema_first_weight(1.0, 3)
    assert ema_first_weight(0.0, 2) == 0.0
    assert math.isclose(ema_first_weight(0.9, 2), 0.1 * 0.9 / (1 - 0.81))


def test_tf32_mode():
    assert tf32_mode("cpu", "highest", torch.float32) == "none"
    assert tf32_mode("cpu", "high", torch.float64) == "none"
    assert tf32_mode("cpu", "high", torch.float32) == "emulated"


def test_library_implementation_runs_through_the_same_experiment(emerging_soap_lib):
    ours = run_spike("REKLS", "highest", shape=(16, 8), steps=6, spike_step=3)
    theirs = run_spike(
        "REKLS", "highest", shape=(16, 8), steps=6, spike_step=3, implementation="library"
    )
    assert theirs.label == "REKLS highest library"
    assert torch.allclose(theirs.eig_L, ours.eig_L, rtol=1e-4)
    assert bool(torch.isnan(theirs.approx_L).all())  # the library exposes no diagnostics
    with pytest.raises(ValueError, match="library supports only"):
        run_spike(implementation="library", eps_mode="relative")


def test_docstring_examples():
    import doctest

    import eigprec_book.chapters.degeneracy.experiments
    import eigprec_book.chapters.degeneracy.spike

    for module in (
        eigprec_book.chapters.degeneracy.experiments,
        eigprec_book.chapters.degeneracy.spike,
    ):
        assert doctest.testmod(module).failed == 0


# -- bounds printed in the prose ----------------------------------------------------------------


@given(
    value=st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False),
    spec=st.sampled_from([".0f", ".1f", ".3f", ".5f", ".0e", ".1e", ".2e"]),
)
def test_printed_bound_prints_a_true_and_tight_bound(value, spec):
    low = float(format(printed_bound(value, spec, "lower"), spec))
    high = float(format(printed_bound(value, spec, "upper"), spec))
    assert low <= value <= high
    nearest = float(format(value, spec))
    # Never more than one unit of the last printed digit away from plain rounding.
    unit = 10.0 ** -int(spec[1:-1]) if spec.endswith("f") else abs(nearest) * 10 ** -int(spec[1])
    slack = unit * 1e-6 + 8 * math.ulp(abs(value) + unit)  # float spacing of the texts
    assert nearest - low <= unit + slack
    assert high - nearest <= unit + slack


def test_printed_bound_rounds_the_safe_way_and_checks_input():
    assert format(printed_bound(81.662, ".0f", "lower"), ".0f") == "81"
    assert format(printed_bound(89.935, ".0f", "lower"), ".0f") == "89"
    assert format(printed_bound(0.00553, ".3f", "upper"), ".3f") == "0.006"
    assert format(printed_bound(9.96e-5, ".1e", "upper"), ".1e") == "1.0e-04"
    assert format(printed_bound(2.0, ".1f", "upper"), ".1f") == "2.0"  # exact stays exact
    with pytest.raises(ValueError, match="finite"):
        printed_bound(float("nan"), ".1f", "upper")
    with pytest.raises(ValueError, match="side"):
        printed_bound(1.0, ".1f", "above")
    with pytest.raises(ValueError, match="spec"):
        printed_bound(1.0, ".1g", "upper")


# -- figures: a legend on every panel, coinciding runs stay visible -------------------------


def test_every_spike_panel_has_a_legend_and_runs_differ_in_style():
    import matplotlib.pyplot as plt
    from eigprec_book.chapters.degeneracy import plots

    small = {"shape": (8, 4), "steps": 6, "spike_step": 3}
    runs = [
        run_spike("SOAP", "highest", **small),
        run_spike("REKLS", "highest", **small),
        run_spike("REKLS", "highest", dtype=torch.float64, **small),
    ]
    figs = [
        plots.plot_spike_angles(runs, ref_step=2, k=2, spike_step=3),
        plots.plot_spectra(runs, window=(0, 6)),
        plots.plot_factor_health(runs, window=(0, 6)),
    ]
    try:
        for fig in figs:
            for ax in fig.axes:
                assert ax.get_legend() is not None, ax.get_title()
        for fig in (figs[0], figs[2]):
            for ax in fig.axes:
                styles = {(ln.get_linestyle(), ln.get_marker()) for ln in ax.get_lines()[:3]}
                assert len(styles) == 3, ax.get_title()  # no curve hides another one
    finally:
        for fig in figs:
            plt.close(fig)


def test_library_import_leaves_typing_as_it_was():
    import importlib.util
    import typing

    from eigprec_book.chapters.degeneracy.spike import library_soap_class

    if importlib.util.find_spec("emerging_optimizers") is None:
        pytest.skip("emerging-optimizers is not installed")
    before = getattr(typing, "override", None)
    cls = library_soap_class()
    assert cls.__module__.startswith("emerging_optimizers")
    assert getattr(typing, "override", None) is before
