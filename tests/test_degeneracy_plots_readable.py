"""Every degeneracy figure fits the book's column with text of at least 9 pt (issue 23)."""

import matplotlib
import pytest
import torch

matplotlib.use("Agg")

from eigprec_book.chapters.degeneracy import plots as dp
from eigprec_book.chapters.degeneracy import practice as pr
from eigprec_book.chapters.degeneracy import practice_plots as pp
from eigprec_book.chapters.degeneracy import training as tr
from eigprec_book.chapters.degeneracy import training_plots as tp
from eigprec_book.chapters.degeneracy import transient as tt
from eigprec_book.chapters.degeneracy.experiments import eigvec_rotation_experiment
from eigprec_book.chapters.degeneracy.spike import SpikeConfig, spike_experiment
from eigprec_book.helpers import check_readable, use_book_style

SMALL = {"shape": (12, 6), "batch": 16}


@pytest.fixture(scope="module")
def spike_runs():
    cfg = SpikeConfig("REKLS", shape=(12, 6), steps=14, spike_step=8)
    return [
        spike_experiment(cfg.replace(dtype=torch.float64), label="f64"),
        spike_experiment(cfg, label="f32"),
        spike_experiment(cfg.replace(fp32_matmul_prec="high"), label="tf32"),
    ]


def _figures(spike_runs):
    s = [tr.Setting("SOAP", dtype=torch.float64), tr.Setting("REKLS", "high")]
    train = tr.training_experiment(s, seeds=(0, 1), steps=10, spike_step=5, **SMALL)
    arms = [pr.Arm("REKLS", clip=3.0), pr.Arm("Adam")]
    prac = pr.practice_experiment(arms, seeds=(0, 1), steps=10, spike_step=5, **SMALL)
    trans = tt.transient_experiment(
        [tr.Setting("REKLS", dtype=torch.float64), tr.Setting("REKLS")],
        spike_steps=(12, 14),
        window=3,
        **SMALL,
    )
    sens = tt.sensitivity_experiment(
        [tr.Setting("REKLS", dtype=torch.float64), tr.Setting("REKLS", "high")],
        eps=(1e-4, 1e-8),
        scales=(10.0, 100.0),
        spike_step=12,
        window=3,
        **SMALL,
    )
    from eigprec_book.chapters.degeneracy import diagnosis as dg

    t = [
        dg.trace_spike(
            tr.Setting("REKLS", dtype=torch.float64),
            shape=(12, 6),
            steps=14,
            spike_step=8,
            keep=(9,),
        ),
    ]
    from eigprec_book.chapters.degeneracy.failure_map import failure_map_experiment

    fmap = failure_map_experiment(
        [((12, 6), 0.1), ((6, 12), 0.1), ((24, 6), 0.01), ((12, 6), 0.001)],
        spike_scales=(10.0, 1000.0, 1e4),
        seeds=(0,),
        spike_step=12,
        window=3,
        turn_steps=2,
        k=2,
        batch=16,
    )
    rot = eigvec_rotation_experiment(n=8, ratios=[0.1, 1.0], trials=2, seed=0)
    yield "rotation", dp.plot_rotation(rot)
    yield "spike angles", dp.plot_spike_angles(spike_runs, ref_step=7, k=2, spike_step=8)
    yield "spectra", dp.plot_spectra(spike_runs, window=(4, 12))
    yield "approx", dp.plot_approx_vs_true(spike_runs, step=9)
    yield "health", dp.plot_factor_health(spike_runs, window=(4, 12))
    yield "training", tp.plot_training(train)
    yield "peak spread", pp.plot_peak_spread(prac)
    yield "transient", tp.plot_transient(trans)
    yield "sensitivity", tp.plot_sensitivity(sens, "REKLS high", "REKLS float64")
    yield "r spectra", tp.plot_r_spectra(t, step=9, reference=t[0])
    yield "failure map", tp.plot_failure_map(fmap)


def test_every_chapter_figure_is_readable_in_the_column(spike_runs):
    import matplotlib.pyplot as plt

    with matplotlib.rc_context():
        use_book_style()
        for name, fig in _figures(spike_runs):
            try:
                check_readable(fig)
            except ValueError as err:
                raise AssertionError(f"{name}: {err}") from err
            finally:
                plt.close(fig)
