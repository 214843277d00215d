"""The degeneracy chapter's second testbed (teacher–student MLP) and the row-concentrated spike."""

import doctest
import importlib

import pytest
import torch
from eigprec_book.chapters.degeneracy.mlp import TeacherStudent, mlp_experiment
from eigprec_book.chapters.degeneracy.practice import Arm, practice_experiment, row_spike

TINY = TeacherStudent(d_in=6, hidden=8, d_out=2, spread=100.0, batch=16)
RUN = {"seeds": (0, 1), "steps": 10, "spike_step": 5, "problem": TINY, "eval_size": 32}


def test_docstring_examples_run():
    result = doctest.testmod(importlib.import_module("eigprec_book.chapters.degeneracy.mlp"))
    assert result.attempted > 0 and result.failed == 0


def test_inputs_have_the_covariance_they_claim():
    p = TeacherStudent(d_in=5, hidden=4, d_out=1, spread=1000.0)
    lam = p.eigenvalues()
    assert lam[0] / lam[-1] == pytest.approx(1000.0) and lam.mean() == pytest.approx(1.0)
    m = p.input_map()
    cov = torch.linalg.eigvalsh(m @ m.T).flip(0)
    torch.testing.assert_close(cov, lam)
    x = p.inputs(200_000, 7, m)
    sample = torch.linalg.eigvalsh(x.T @ x / len(x)).flip(0)
    torch.testing.assert_close(sample, lam, rtol=0.03, atol=0.0)


def test_problem_is_deterministic_and_seeded():
    a, b = TeacherStudent(seed=3), TeacherStudent(seed=3)
    torch.testing.assert_close(a.inputs(4, 100), b.inputs(4, 100))
    assert not torch.equal(a.teacher_weights()[0], TeacherStudent(seed=4).teacher_weights()[0])
    assert not torch.equal(a.teacher_weights()[0], a.student_weights(torch.float64)[0])
    for bad in ({"spread": 0.5}, {"batch": 0}, {"spread": float("inf")}):
        with pytest.raises(ValueError):
            TeacherStudent(**bad)


def test_forks_agree_with_runs_from_scratch():
    """The no-spike fork is the run without a spike; branches share the steps before it."""
    arm = Arm("REKLS", dtype=torch.float64)
    forked = mlp_experiment([arm], clips=(1e6,), **RUN)
    nospike = mlp_experiment([arm], **{**RUN, "spike_scale": 1.0})
    torch.testing.assert_close(forked.losses[f"{arm.label}, no spike"], nospike.losses[arm.label])
    spiked, huge = forked.losses[arm.label], forked.losses[f"{arm.label}, clip 1e+06×"]
    torch.testing.assert_close(spiked, huge)  # a threshold that never bites
    torch.testing.assert_close(spiked[:, :6], nospike.losses[arm.label][:, :6])
    assert not torch.allclose(spiked[:, 6:], nospike.losses[arm.label][:, 6:])  # it acts


def test_clipping_tames_the_spike_and_training_learns():
    r = mlp_experiment([Arm("Adam")], clips=(3.0,), **{**RUN, "steps": 40, "spike_step": 30})
    free, clipped = r.losses["Adam"], r.losses["Adam, clip 3×"]
    assert (clipped[:, 31:].max(dim=1).values < free[:, 31:].max(dim=1).values).all()
    nos = r.losses["Adam, no spike"]
    assert (nos[:, 30] < nos[:, 0]).all()


def test_mlp_experiment_validates():
    with pytest.raises(ValueError, match="arm"):
        mlp_experiment([], **RUN)
    with pytest.raises(ValueError, match="clips"):
        mlp_experiment([Arm("Adam", clip=3.0)], **RUN)
    with pytest.raises(ValueError, match="spike_step"):
        mlp_experiment([Arm("Adam")], **{**RUN, "spike_step": 10})
    with pytest.raises(ValueError, match="lr"):
        mlp_experiment([Arm("Adam")], **{**RUN, "lr": -1.0})


def test_row_spike_has_the_norm_and_rank_it_claims():
    g = torch.randn(12, 5, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    s = row_spike(g, 2, 1000.0, seed=1)
    ratio = torch.linalg.matrix_norm(s) / torch.linalg.matrix_norm(g)
    assert ratio.item() == pytest.approx(1000.0)
    changed = (s != g).any(dim=1)
    assert int(changed.sum()) == 2
    assert int(torch.linalg.matrix_rank(s - g)) == 2
    torch.testing.assert_close(s, row_spike(g, 2, 1000.0, seed=1))  # seeded
    for bad in ({"rows": 0}, {"rows": 13}, {"scale": 0.5}):
        with pytest.raises(ValueError):
            row_spike(g, **{"rows": 2, "scale": 10.0, "seed": 0, **bad})


def test_practice_row_spike_changes_only_the_spike():
    toy = {"shape": (12, 6), "batch": 16, "steps": 10, "spike_step": 5, "seeds": (0,)}
    arm = [Arm("REKLS", dtype=torch.float64)]
    iid = practice_experiment(arm, **toy).losses[arm[0].label]
    rows = practice_experiment(arm, spike_rows=1, **toy).losses[arm[0].label]
    torch.testing.assert_close(iid[:, :6], rows[:, :6])
    assert not torch.allclose(iid[:, 6:], rows[:, 6:])
    with pytest.raises(ValueError, match="spike_rows"):
        practice_experiment(arm, spike_rows=13, **toy)
