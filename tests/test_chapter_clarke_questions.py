"""Tests for the Clarke chapter's issue-15 experiments: which element is steeper, the chain rule,
the cluster tolerance, gradcheck, choosing k, the training questions and the CPU costs."""

from __future__ import annotations

import json
import math

import pytest
import torch
from eigprec_book.chapters.clarke import experiments as ce
from eigprec_book.chapters.clarke import regression, speed, training


def test_gradcheck_fails_directly_and_passes_symmetrised():
    r = ce.gradcheck_demo(n=4, k=1, seed=0)
    assert r == {
        "kth_direct": False,
        "kth_symmetrised": True,
        "eigvalsh_direct": False,
        "eigvalsh_symmetrised": True,
    }


@pytest.mark.parametrize("multiplicity", [2, 3, 4])
def test_cluster_step_slopes_match_the_one_sided_derivative(multiplicity):
    rows = ce.cluster_step_slopes(n=7, multiplicity=multiplicity, seed=1)
    s = 1 / math.sqrt(multiplicity)
    by = {(r["k in cluster"], r["step"]): r for r in rows}
    # eigenvector: a unit step moves one copy by ±1; the sorted λ_k follows only at the edges
    expected_vec = {
        ("top", "+G"): 1.0,
        ("top", "−G"): 0.0,
        ("middle", "+G"): 0.0,
        ("middle", "−G"): 0.0,
        ("bottom", "+G"): 0.0,
        ("bottom", "−G"): -1.0,
    }
    if multiplicity == 2:  # "middle" is the top copy of a pair
        expected_vec["middle", "+G"] = 1.0
    for key, vec in expected_vec.items():
        assert by[key]["eigenvector"] == pytest.approx(vec, abs=1e-5), key
        sign = 1.0 if key[1] == "+G" else -1.0
        assert by[key]["mean"] == pytest.approx(sign * s, abs=1e-5), key


def test_chain_rule_counterexamples():
    odd, median = ce.chain_rule_counterexamples()
    assert (odd["true"], odd["eigenvector"]) == (1.0, 0.0)
    assert odd["mean"] == pytest.approx(1.0, abs=1e-12)
    assert (median["true"], median["eigenvector"]) == (0.0, 0.0)
    assert median["mean"] == pytest.approx(1 / 3, abs=1e-12)


def test_tolerance_check_default_resolves_gaps_the_former_merged():
    # Issue 49: true gaps of 5 and 10 eps · max|λ| at n = 100 (float32) — the former default,
    # 20 eps on computed gaps, merged them; the default rule (refined gaps next to λ_k) keeps
    # every one apart, its "mean" gradient the solver's own q qᵀ. 3e-5 (250 eps): neither merges.
    eps = torch.finfo(torch.float32).eps
    rows = ce.tolerance_check(n=100, gaps=(5 * eps, 10 * eps, 3e-5), batch=8, k=50, seed=0)
    for r in rows:
        assert r["apart_default"] == r["batch"] == 8
        assert r["err_default"] <= r["err_solver"] + 1e-7
    for r in rows[:2]:
        assert r["gap"] < r["tol_former"] and r["apart_former"] == 0 and r["err_former"] > 0.5
    assert rows[2]["apart_former"] == 8 and rows[2]["err_former"] == rows[2]["err_default"]
    assert rows[0]["tol_default"] == pytest.approx(2 * eps)


def test_convexity_along_lines_signs():
    rows = ce.convexity_along_lines(n=6, features=2, lines=300, seed=3)
    assert rows[0]["max_d2"] <= 1e-9  # λ_min ∘ affine: concave
    assert rows[-1]["min_d2"] >= -1e-9  # λ_max ∘ affine: convex
    for r in rows[1:-1]:
        assert r["min_d2"] < 0 < r["max_d2"]


def test_linear_baseline_and_noise_floor():
    data = regression.synthetic_housing(rows=3000)
    lin = training.linear_baseline(data, seed=0)
    floor = training.noise_floor(data, seed=0)
    assert floor is not None and 0 < floor < lin < 1
    assert training.noise_floor({k: v for k, v in data.items() if k != "noise_std"}) is None
    # an exactly linear target: least squares reaches the noise level
    g = torch.Generator().manual_seed(0)
    X = torch.randn(2000, 3, generator=g)
    y = X @ torch.tensor([1.0, -2.0, 0.5]) + 1e-3 * torch.randn(2000, generator=g)
    assert training.linear_baseline({"X": X, "y": y}) < 1e-2


def test_linear_baseline_is_the_same_number_every_call():
    # "Two builds give identical numbers": the details page's least-squares baseline moved in
    # its last bits from build to build. LAPACK's gelsy (torch.linalg.lstsq's CPU default)
    # returned different coefficients for the same input from call to call in one process
    # (6 distinct of 15 calls, other allocations between them); so did the RMSE.
    data = regression.synthetic_housing(rows=20640, seed=0)
    seen, held = set(), []
    for i in range(30):
        held.append(torch.empty(13 + 7 * i, dtype=torch.uint8))  # the allocator's state moves
        seen.add(training.linear_baseline(data, seed=2).hex())
    assert len(seen) == 1, seen


def test_seed_sweep_rows():
    data = regression.synthetic_housing(rows=400)
    rows = training.seed_sweep(data, sizes=(2, 3), seeds=(0, 1), epochs=1)
    assert [(r["n"], r["seed"]) for r in rows] == [(2, 0), (2, 1), (3, 0), (3, 1)]
    assert rows[0]["linear"] == pytest.approx(training.linear_baseline(data, 0), rel=1e-12)


def test_step_vs_gap_and_gaps_at_k():
    data = regression.synthetic_housing(rows=1000)
    r = regression.train_spectral_regression(data, 6, epochs=1, keep_model=True)
    assert r["model_before_last_step"] is not None
    g = training.gaps_at_k(r["model"], r["X_test"])
    assert g["gap"].shape == (200,) and (g["gap"] > 0).all()
    # the library's default next to λ_k, relative to max|λ| (float32: 2 eps since issue 49)
    assert g["tol"] == pytest.approx(2 * torch.finfo(torch.float32).eps)
    s = training.step_vs_gap(r)
    assert s["min_gap"] == pytest.approx(float(g["gap"].min()))
    assert s["median_step"] > 0 and 0 <= s["frac_step_exceeds_gap"] <= 1


def test_gaps_at_k_sees_a_constructed_tie():
    m = regression.SpectralRegressor(2, 4, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        m.A.zero_()
    g = training.gaps_at_k(m, torch.zeros(3, 2))["gap"]
    # μ evenly spaced on [-1, 1] with step 2/3: the gap at k = 2 is 2/3 of max|λ| = 1
    torch.testing.assert_close(g, torch.full((3,), 2 / 3, dtype=torch.float64))


def test_symmetric_start_modes():
    data = regression.synthetic_housing(rows=3000)
    mean = training.train_symmetric_start(data, 6, subgradient="mean", epochs=2)
    vec = training.train_symmetric_start(data, 6, subgradient="eigenvector", epochs=2)
    # "mean" keeps every matrix a multiple of the identity: a linear model, fully tied
    assert mean["tied_fraction"] == 1.0 and mean["distinct"] == 1.0
    assert mean["offdiag"] == 0.0
    # "eigenvector" breaks the tie
    assert vec["tied_fraction"] < 0.5 and vec["distinct"] > 1


def test_cpu_method_costs_keys_and_threads():
    before = torch.get_num_threads()
    t = speed.cpu_method_costs(batch=3, n=20, repeats=1, threads=1)
    assert torch.get_num_threads() == before
    assert set(t) == {
        "eigvalsh",
        "forward",
        "forward_grad",
        "torch_train",
        "train_eigh",
        "train_subset",
        "train_inverse_iteration",
        "train_mean",
    }
    assert all(v > 0 for v in t.values())


def test_recorded_gpu_summary_reads_a_record():
    rec = {
        "provenance": {"torch": "2.13.0"},
        "headline": {"n": 100, "batch": 500},
        "grid": [
            {
                "n": 100,
                "batch": 500,
                "forward_speedup": {"cupy": 3.0, "torch": 1.0},
                "train_speedup": {"cupy/eigenvector": 2.0, "torch/eigenvector": 1.1},
            }
        ],
    }
    rows = speed.recorded_gpu_summary(rec)
    assert [(r["backend"], r["fwd ×"], r["train ×"]) for r in rows] == [
        ("cupy", 3.0, 2.0),
        ("torch", 1.0, 1.1),
    ]
    assert rows[0]["torch"] == "2.13.0"
    assert speed.recorded_gpu_summary(None) == []
    assert speed.recorded_gpu_summary({**rec, "headline": None}) == []
    # issue 49: the small-n rows beside the headline's
    small = {
        "n": 16,
        "batch": 100,
        "forward_speedup": {"torch": 0.4},
        "train_speedup": {"torch/eigenvector": 0.5},
    }
    rows = speed.recorded_gpu_summary({**rec, "grid": [*rec["grid"], small]}, small_n=(16,))
    assert [(r["n"], r["backend"], r["fwd ×"]) for r in rows][-1] == (16, "torch", 0.4)


def test_recorded_backends_reads_the_h200_record():
    from .conftest import ROOT

    h200 = json.loads((ROOT / "book" / "data" / "kth_h200_2026-11-26.json").read_text())
    rows = {r["n"]: r for r in speed.recorded_backends(h200)}
    assert sorted(rows) == [45, 100, 256, 1024]
    r = h200["results"]["b8_n1024"]
    assert rows[1024]["speed-up"] == r["torch_eigvalsh_s"] / r["cupy_fwd_s"] < 1
    assert rows[1024]["CuPy error"] == r["cupy_maxrelerr"]
    assert speed.recorded_backends(None) == []


def test_load_diabetes_is_real_bundled_data():
    pytest.importorskip("sklearn")
    d = training.load_diabetes()
    assert tuple(d["X"].shape) == (442, 10) and d["source"] == "diabetes"


def _small_figures(plots) -> list:
    """The costs, gap-histogram and seed-sweep figures, drawn from small stand-in data."""
    costs = {n: speed.cpu_method_costs(batch=2, n=n, repeats=1) for n in (16, 20)}
    rows = [
        {"n": n, "seed": s, "test_rmse": 0.5 / n + 0.01 * s, "linear": 0.7}
        for n in (2, 4)
        for s in (0, 1)
    ]
    return [
        plots.plot_cpu_costs(costs),
        plots.plot_gap_histogram(torch.tensor([1e-3, 1e-2, 0.1]), 4e-6, 0.03, 5e-7),
        plots.plot_seed_sweep(rows, "toy data", floor=0.1),
    ]


def test_new_figures_have_titles_labels_and_legends():
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from eigprec_book.chapters.clarke import plots

    figs = _small_figures(plots)
    for fig in figs:
        for ax in fig.axes:
            assert ax.get_title() and ax.get_xlabel() and ax.get_ylabel()
            assert ax.get_legend() is not None
        plt.close(fig)


def test_cpu_method_costs_times_one_thread_in_thread_cpu_time(monkeypatch):
    # One thread: the calling thread's CPU time (blind to other processes); otherwise wall
    # clock, since thread time would miss the work of the other threads.
    calls = []

    def fake_clock(fn):
        fn()
        calls.append(1)
        return 1.0

    monkeypatch.setattr(speed, "thread_time_clock", fake_clock)
    t = speed.cpu_method_costs(batch=2, n=20, repeats=2, threads=1)
    assert set(t.values()) == {1.0} and len(calls) == 2 * len(t)
    calls.clear()
    t = speed.cpu_method_costs(batch=2, n=20, repeats=1, threads=None)
    assert not calls and all(v != 1.0 for v in t.values())


def test_every_figure_fits_the_column_with_readable_text():
    # Issue 23: at most 7 in wide, no text under 9 pt, under the book's style; and the
    # histogram names the tolerance it draws, not a formula the default no longer uses.
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from eigprec_book.chapters.clarke import plots
    from eigprec_book.helpers import check_readable, use_book_style

    with matplotlib.rc_context():
        use_book_style()
        figs = [
            plots.plot_crossing_family(ce.crossing_family(steps_per_unit=10)),
            *_small_figures(plots),
        ]
        for fig in figs:
            check_readable(fig)
        labels = [t.get_text() for t in figs[2].axes[0].get_legend().get_texts()]
        assert not any("8·eps" in s for s in labels), labels
        for fig in figs:
            plt.close(fig)


def test_first_counterexample_fails_through_the_sum_not_through_lambda_max():
    # Issue 33, item 6: λ_max of a 2 × 2 is convex, hence Clarke regular — its one-sided
    # derivative at 0 along d equals the support function max over ∂ = [0, 1] of g·d; the
    # second term, −λ_max(diag(−t, 0)) = min(t, 0), is not: its one-sided derivative along
    # +1 is 0 while its Clarke derivative (max over [0, 1]) is 1.
    def lam_max(t: float) -> float:
        return float(torch.linalg.eigvalsh(torch.diag(torch.tensor([t, 0.0])))[-1])

    h = 1e-6
    for d in (1.0, -1.0):
        one_sided = (lam_max(h * d) - lam_max(0.0)) / h
        assert one_sided == pytest.approx(max(0.0, d), abs=1e-6)  # regular
    minus_term = (-lam_max(-h) + lam_max(0.0)) / h  # along +1
    assert minus_term == pytest.approx(0.0, abs=1e-6) and minus_term < max(0.0, 1.0)
    doc = ce.chain_rule_counterexamples.__doc__ or ""
    assert "Clarke regular" in doc and "sum" in doc
