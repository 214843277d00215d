"""Tests for eigprec_book.chapters.clarke: the chapter's experiments return what it claims."""

from __future__ import annotations

import math

import pytest
import torch
from eigprec_book.chapters.clarke import experiments as ce
from eigprec_book.chapters.clarke import regression, speed


def test_gradient_check_agrees_three_ways():
    r = ce.gradient_check(n=6, k=2, seed=0)
    assert r["gap"] > 0.1
    assert r["max_abs_diff_autograd"] < 1e-12
    assert r["fd_rel_err"] < 1e-6


def test_crossing_family_kinks_and_slopes():
    fam = ce.crossing_family()
    t, lam = fam["t"], fam["eigenvalues"]
    torch.testing.assert_close(lam[:, 0], torch.minimum(t, torch.zeros_like(t)))
    torch.testing.assert_close(lam[:, 2], torch.maximum(t, torch.ones_like(t)))
    i0, i1 = fam["crossings"].tolist()
    assert t[i0] == 0 and t[i1] == 1
    # mean mode: midpoint of one-sided slopes at each crossing
    torch.testing.assert_close(
        fam["slope_mean"][i0, :2], torch.full((2,), 0.5, dtype=torch.float64)
    )
    torch.testing.assert_close(
        fam["slope_mean"][i1, 1:], torch.full((2,), 0.5, dtype=torch.float64)
    )
    # eigenvector mode: some convex combination, inside [0, 1]
    s = fam["slope_eigenvector"][fam["crossings"]]
    assert ((s >= -1e-12) & (s <= 1 + 1e-12)).all()
    # away from crossings both modes agree and slopes are 0 or 1
    away = (t - 0).abs().gt(0.05) & (t - 1).abs().gt(0.05)
    torch.testing.assert_close(fam["slope_mean"][away], fam["slope_eigenvector"][away])
    assert set(fam["slope_mean"][away].round().unique().tolist()) == {0.0, 1.0}


def test_crossing_family_is_deterministic():
    a, b = ce.crossing_family(seed=3), ce.crossing_family(seed=3)
    for key in a:
        assert torch.equal(a[key], b[key])


@pytest.mark.parametrize("multiplicity,k", [(2, 1), (3, 2), (4, 1)])
def test_clarke_membership_rows(multiplicity, k):
    rows = ce.clarke_membership(n=6, start=1, multiplicity=multiplicity, k=k)
    assert len(rows) == 4
    for r in rows:
        tol = 1e-12 if r["dtype"] == "float64" else 1e-6
        assert r["symmetry_err"] <= tol and r["min_eigenvalue"] >= -tol
        assert r["trace_err"] <= tol and r["outside_eigenspace"] <= tol
        if r["mode"] == "mean":
            assert r["dist_to_min_norm"] <= tol * 10
            assert r["basis_dependence"] <= tol * 10
            assert r["frobenius_norm"] == pytest.approx(1 / math.sqrt(multiplicity), abs=tol)
        else:
            # a rank-one element: norm 1 > the minimum 1/sqrt(r), and it moves with the basis
            assert r["frobenius_norm"] == pytest.approx(1.0, abs=tol)
            assert r["basis_dependence"] > 0.1


def test_eigh_backward_demo():
    d = ce.eigh_backward_demo()
    assert not d["diagonal"]["eigh_vector_finite"]
    assert d["diagonal"]["solver_gap"] == 0.0
    assert d["rotated"]["eigh_vector_max_abs"] > 1e10
    for case in d.values():
        assert case["eigvalsh_finite"] and case["kth_finite"]
        assert case["eigvalsh_max_abs"] <= 1 + 1e-12 and case["kth_norm"] <= 1 + 1e-12


def test_stream_race_demo_refuses_without_cuda():
    if torch.cuda.is_available():
        pytest.skip("this test checks the refusal on machines without CUDA")
    with pytest.raises(RuntimeError, match="CUDA"):
        speed.stream_race_demo()


def test_synthetic_housing_shape_and_determinism():
    a, b = regression.synthetic_housing(seed=1), regression.synthetic_housing(seed=1)
    assert a["X"].shape == (20640, 8) and a["y"].shape == (20640,)
    assert torch.equal(a["X"], b["X"]) and torch.equal(a["y"], b["y"])
    assert not torch.equal(a["y"], regression.synthetic_housing(seed=2)["y"])


def test_load_housing_offline_fallback_says_why():
    d = regression.load_housing(allow_download=False)
    assert d["source"] == "synthetic" and d["note"]


def test_spectral_regressor_mu_nondecreasing_and_init_scale():
    m = regression.SpectralRegressor(8, 10, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        m.theta.copy_(torch.randn(10, generator=torch.Generator().manual_seed(1)) * 5)
    assert (m.mu().diff() >= 0).all()
    std = float(m.A.detach().std())
    assert std == pytest.approx(1 / (math.sqrt(10) * 8), rel=0.2)
    with pytest.raises(ValueError, match="eig must be"):
        regression.SpectralRegressor(8, 4, eig="numpy")


def test_spectral_regressor_kth_and_torch_agree():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(5, 8, generator=g)
    m1 = regression.SpectralRegressor(8, 6, generator=torch.Generator().manual_seed(2))
    m2 = regression.SpectralRegressor(8, 6, eig="torch", generator=torch.Generator().manual_seed(2))
    torch.testing.assert_close(m1(x), m2(x))


def test_training_learns_and_is_reproducible():
    data = regression.synthetic_housing(rows=2000)
    r1 = regression.train_spectral_regression(data, n=6, epochs=3, seed=0)
    r2 = regression.train_spectral_regression(data, n=6, epochs=3, seed=0)
    assert r1["test_rmse"] == r2["test_rmse"]
    assert r1["train_rmse"][-1] < r1["train_rmse"][0]
    assert r1["test_rmse"] < 0.9  # better than predicting the mean (1.0)
    assert r1["nonfinite_steps"] == 0


def test_inverse_iteration_tradeoff_bins_and_accuracy():
    r = speed.inverse_iteration_tradeoff(batch=60, n=12, k=5, repeats=1, dtype=torch.float64)
    assert sum(b["count"] for b in r["bins"]) == 60
    for b in r["bins"]:
        if b["count"] and b["lo"] >= 1e-4:
            assert b["max_grad_err"] < 1e-9
    for key in ("forward", "train_exact", "train_invit"):
        assert r[key] > 0
