"""The spike at later steps and the eps × spike-size grid (degeneracy chapter)."""

import math

import matplotlib
import pytest
import torch
from eigprec_book.chapters.degeneracy.training import Setting, training_experiment
from eigprec_book.chapters.degeneracy.training_plots import (
    plot_r_spectra,
    plot_sensitivity,
    plot_training,
    plot_transient,
)
from eigprec_book.chapters.degeneracy.transient import sensitivity_experiment, transient_experiment

from .conftest import once_per_run

matplotlib.use("Agg")
SMALL = {"shape": (32, 16), "batch": 64}


@pytest.fixture(scope="module")
def transient(tmp_path_factory):
    settings = [Setting("REKLS", dtype=torch.float64), Setting("REKLS", "high")]
    return once_per_run(
        tmp_path_factory,
        "transient-experiment",
        lambda: transient_experiment(settings, spike_steps=(50, 600), window=15, **SMALL),
    )


def test_early_spike_fails_late_spike_does_not(transient):
    rows = {(r["setting"], r["spike step"]): r for r in transient.rows}
    assert rows[("REKLS high", 50)]["peak vs float64"] > 10
    assert rows[("REKLS high", 600)]["peak vs float64"] < 1.5
    assert rows[("REKLS float64", 600)]["peak vs float64"] == 1.0


def test_by_step_600_l_is_near_isotropic_and_its_basis_wanders(transient):
    rows = {(r["setting"], r["spike step"]): r for r in transient.rows}
    early, late = rows[("REKLS float64", 50)], rows[("REKLS float64", 600)]
    assert late["lambda1/lambda2"] < early["lambda1/lambda2"]
    assert late["lambda1/lambda_min"] < 100 < early["lambda1/lambda_min"]
    # Near-isotropic: the top vector turns a lot in ten spike-free float64 steps.
    assert late["top-1 turn (10 steps)"] > 10 > early["top-1 turn (10 steps)"]


def test_transient_curves_start_from_the_unspiked_run(transient):
    for (label, step), curve in transient.curves.items():
        assert curve[0] == transient.baseline[label][step]
        assert curve.shape == (16,)


def test_transient_rejects_bad_steps():
    with pytest.raises(ValueError, match="≥ 11"):
        transient_experiment([Setting("SOAP")], spike_steps=(5,), **SMALL)
    with pytest.raises(ValueError, match="k must"):
        transient_experiment([Setting("SOAP")], spike_steps=(20,), k=40, **SMALL)
    with pytest.raises(ValueError, match="window"):
        transient_experiment([Setting("SOAP")], spike_steps=(20,), window=0, **SMALL)


def test_sensitivity_grid_matches_a_direct_run():
    kw = {"spike_step": 12, "window": 4, "shape": (8, 4), "batch": 16}
    r = sensitivity_experiment([Setting("SOAP")], eps=[1e-8, 1e-4], scales=[1.0, 1e3], **kw)
    assert r.peak["SOAP highest"].shape == (2, 2)
    # The fork must equal an unbranched run with the same spike.
    direct = training_experiment(
        [Setting("SOAP")],
        seeds=(0,),
        steps=16,
        spike_step=12,
        spike_scale=1e3,
        eps=1e-4,
        lr=0.1,
        shape=(8, 4),
        batch=16,
    )
    assert r.peak["SOAP highest"][1, 1] == direct.losses["SOAP highest"][0, 13:].max()
    assert torch.equal(
        r.ratio("SOAP highest", "SOAP highest"), torch.ones(2, 2, dtype=torch.float64)
    )
    with pytest.raises(KeyError, match="no setting"):
        r.ratio("SOAP high", "SOAP highest")
    with pytest.raises(ValueError, match="positive"):
        sensitivity_experiment([Setting("SOAP")], eps=[0.0], **kw)


def _check_panels(fig, skip_colorbar=False):
    for ax in fig.axes:
        if skip_colorbar and ax.get_label() == "<colorbar>":
            continue
        assert ax.get_title() and ax.get_xlabel() and ax.get_ylabel()
        if not ax.images:
            assert ax.get_legend() is not None


def test_every_panel_has_title_labels_and_legend(transient):
    r = training_experiment(
        [Setting("SOAP"), Setting("REKLS")], seeds=(0, 1), steps=6, spike_step=3, **SMALL
    )
    fig = plot_training(r)
    assert len(fig.axes) == 2
    _check_panels(fig)
    with pytest.raises(KeyError):
        plot_training(r, labels=["nope"])
    fig = plot_transient(transient)
    _check_panels(fig)
    for ax in fig.axes:  # settings that coincide (equal λ₁/λ₂ early on) stay distinguishable
        lines = [ln for ln in ax.get_lines() if "loss before" not in ln.get_label()]
        assert len({(ln.get_marker(), ln.get_markersize()) for ln in lines}) == len(lines)
    kw = {"spike_step": 12, "window": 2, "shape": (8, 4), "batch": 16}
    s = sensitivity_experiment(
        [Setting("SOAP"), Setting("SOAP", "high")], eps=[1e-8], scales=[1.0, 10.0], **kw
    )
    _check_panels(plot_sensitivity(s, "SOAP high", "SOAP highest"), skip_colorbar=True)


def test_r_spectra_plot_draws_every_run():
    from eigprec_book.chapters.degeneracy.diagnosis import trace_spike

    runs = [trace_spike(Setting("SOAP"), steps=6, spike_step=3, shape=(8, 4))]
    ref = trace_spike(Setting("SOAP", dtype=torch.float64), steps=6, spike_step=3, shape=(8, 4))
    fig = plot_r_spectra(runs, 4, reference=ref)
    _check_panels(fig)
    assert len(fig.axes[0].lines) == 2 and not math.isnan(fig.axes[1].lines[0].get_ydata()[0])
    with pytest.raises(IndexError):
        plot_r_spectra(runs, 6)


def test_transient_takes_the_factor_beta_and_checks_it():
    import torch
    from eigprec_book.chapters.degeneracy.training import Setting
    from eigprec_book.chapters.degeneracy.transient import transient_experiment

    kw = {"spike_steps": (12,), "window": 2, "shape": (8, 4), "batch": 16}
    s = [Setting("REKLS", dtype=torch.float64)]
    a = transient_experiment(s, shampoo_beta=0.95, **kw)
    b = transient_experiment(s, shampoo_beta=0.5, **kw)
    assert a.config["shampoo_beta"] == 0.95 and b.config["shampoo_beta"] == 0.5
    assert a.rows[0]["peak"] != b.rows[0]["peak"]  # β reaches the optimizer
    with pytest.raises(ValueError, match="shampoo_beta"):
        transient_experiment(s, shampoo_beta=1.0, **kw)
