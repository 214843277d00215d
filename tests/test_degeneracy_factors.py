"""Both-factor health metric of the degeneracy chapter: off-diagonal mass and its experiment."""

import doctest
import math

import pytest
import torch
from eigprec_book.chapters.degeneracy import factors
from eigprec_book.chapters.degeneracy.factors import factor_health_experiment, offdiag_mass
from eigprec_book.chapters.degeneracy.training import Setting


def test_docstring_examples_run():
    result = doctest.testmod(factors)
    assert result.attempted > 0 and result.failed == 0


def test_offdiag_mass_ignores_rotations_inside_a_cluster_but_not_across():
    f = torch.diag(torch.tensor([3.0, 3.0, 1.0], dtype=torch.float64))
    c, s = math.cos(0.4), math.sin(0.4)
    inside = torch.tensor([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]], dtype=torch.float64)
    across = torch.tensor([[c, 0.0, -s], [0.0, 1.0, 0.0], [s, 0.0, c]], dtype=torch.float64)
    assert offdiag_mass(inside, f) < 1e-12
    # rotating e1 and e3 by θ mixes λ = 3 and 1: off-diagonal (3 − 1)·sin θ cos θ, twice
    expected = math.sqrt(2) * 2 * s * c / torch.linalg.matrix_norm(f).item()
    assert offdiag_mass(across, f) == pytest.approx(expected)
    assert offdiag_mass(inside, torch.zeros(3, 3)) == 0.0
    with pytest.raises(ValueError, match="square"):
        offdiag_mass(torch.eye(3), torch.eye(2))


def test_experiment_scores_both_factors_against_float64():
    settings = [Setting("REKLS", dtype=torch.float64), Setting("REKLS", "highest")]
    kw = {"shape": (8, 4), "seeds": (0, 1), "steps": 6, "spike_step": 3}
    h = factor_health_experiment(settings, **kw)
    again = factor_health_experiment(settings, **kw)
    for label in h.offdiag_L:
        assert h.offdiag_L[label].shape == h.offdiag_R[label].shape == (2, 6)
        assert torch.equal(h.update_rms[label], again.update_rms[label])
    # the float64 run is its own reference: eigh diagonalises its factors to rounding
    assert h.offdiag_L["REKLS float64"].max() < 1e-12
    assert h.offdiag_R["REKLS float64"].max() < 1e-12
    assert (h.update_rms["REKLS highest"] > 0).all()
    with pytest.raises(ValueError, match="setting"):
        factor_health_experiment([])
    with pytest.raises(ValueError, match="spike_step"):
        factor_health_experiment(settings, steps=5, spike_step=5)


def test_low_rank_gradients_have_the_rank_asked_for_and_bad_ranks_are_refused():
    from eigprec_book.chapters.degeneracy.factors import _gradients

    grads = list(_gradients((10, 8), 0, 3, 1, 1000.0, rank=3))
    assert all(int(torch.linalg.matrix_rank(g)) == 3 for g in grads)
    assert torch.linalg.matrix_norm(grads[1]) > 100 * torch.linalg.matrix_norm(grads[0])
    full = list(_gradients((10, 8), 0, 2, 1, 1.0))
    assert int(torch.linalg.matrix_rank(full[0])) == 8
    settings = [Setting("REKLS", dtype=torch.float64)]
    h = factor_health_experiment(settings, shape=(8, 8), seeds=(0,), steps=4, spike_step=2, rank=2)
    assert h.offdiag_L["REKLS float64"].shape == (1, 4)
    with pytest.raises(ValueError, match="rank"):
        factor_health_experiment(settings, shape=(8, 4), steps=4, spike_step=2, rank=5)
