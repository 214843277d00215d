"""Training experiments of the degeneracy chapter: the regression, the runner, the settings."""

import doctest
import importlib
import math

import pytest
import torch
from eigprec_book.chapters.degeneracy.kl_methods import ClampedEigvalSOAP, GramStartSOAP
from eigprec_book.chapters.degeneracy.schedule_methods import (
    DelayedSOAP,
    OneSidedSOAP,
    SkipFirstSOAP,
)
from eigprec_book.chapters.degeneracy.training import (
    REMEDIES,
    Regression,
    Setting,
    _Trainer,
    build_optimizer,
    chapter_settings,
    training_experiment,
    training_table,
)

from eigprec.precision import current_matmul_precision
from eigprec.soap import SOAP

SMALL = {"shape": (16, 8), "batch": 32}


def test_setting_labels_and_validation():
    assert Setting("SOAP", dtype=torch.float64).label == "SOAP float64"
    assert Setting("REKLS", "highest", "high").label == "REKLS highest/high"
    assert Setting("REKLS", "high", remedy="relative eps").label == "REKLS high + relative eps"
    with pytest.raises(ValueError, match="method"):
        Setting("Adam")
    with pytest.raises(ValueError, match="precision"):
        Setting("SOAP", "tf32")
    with pytest.raises(TypeError, match="dtype"):
        Setting("SOAP", dtype=torch.float16)
    with pytest.raises(ValueError, match="remedy"):
        Setting("SOAP", remedy="prayer")


def test_chapter_settings_cover_every_remedy_once_per_method():
    settings = chapter_settings(["REKLS"])
    labels = [s.label for s in settings]
    assert len(labels) == len(set(labels))
    # Every remedy but the authors' full recipe and the schedules, which only the failure
    # map's remedy record runs (the pages' settings, and so their CPU time, stay as they were).
    not_run = {"KL-Shampoo recipe", "skip first step", "delayed start", "one-sided"}
    assert {s.remedy for s in settings} == set(REMEDIES) - not_run
    assert "REKLS highest/high" in labels and "REKLS float64" in labels


def test_build_optimizer_picks_class_and_options():
    w = torch.nn.Parameter(torch.zeros(4, 2))
    assert type(build_optimizer(Setting("SOAP"), w, 0.1)) is SOAP
    assert isinstance(
        build_optimizer(Setting("SOAP", remedy="Gram first step"), w, 0.1), GramStartSOAP
    )
    for remedy, cls in (
        ("skip first step", SkipFirstSOAP),
        ("delayed start", DelayedSOAP),
        ("one-sided", OneSidedSOAP),
    ):
        assert type(build_optimizer(Setting("REKLS", remedy=remedy), w, 0.1)) is cls
    assert build_optimizer(Setting("SOAP", remedy="delayed start"), w, 0.1).start_step == 10
    opt = build_optimizer(Setting("REKLS", "high", remedy="eigenvalue clamp"), w, 0.1)
    assert isinstance(opt, ClampedEigvalSOAP)
    assert opt.use_eigh and opt.use_kl_shampoo and opt.fp32_matmul_prec == "high"
    relative = build_optimizer(Setting("SOAP", remedy="relative eps"), w, 0.1)
    assert relative.eps_mode == "relative" and not relative.use_eigh


def test_regression_gradient_and_loss_are_exact():
    problem = Regression(shape=(6, 4), batch=16, noise=0.0, seed=3)
    target = problem.target()
    # Noise-free data: at W = W* every sample's residual is zero.
    assert problem.gradient(target, 5, target).abs().max().item() == 0.0
    assert problem.loss(target) == 0.0
    zero = torch.zeros(6, 4, dtype=torch.float64)
    assert problem.loss(zero) == pytest.approx(0.5 * target.square().sum().item() / 6)
    # Batches depend only on (seed, step): the same step gives the same gradient.
    assert torch.equal(problem.gradient(zero, 7, target), problem.gradient(zero, 7, target))
    assert not torch.equal(problem.gradient(zero, 7, target), problem.gradient(zero, 8, target))
    with pytest.raises(ValueError, match="batch"):
        Regression(batch=0)


def test_float64_training_converges_without_spike():
    r = training_experiment(
        [Setting("REKLS", dtype=torch.float64)], seeds=(0,), steps=60, spike_step=None, **SMALL
    )
    curve = r.losses["REKLS float64"][0]
    assert curve[-1] < curve[0] / 4
    assert torch.isfinite(curve).all()


def test_spike_hurts_tf32_far_more_than_float64():
    # The chapter's claim at a small size: the 'high' run's loss explodes, float64's does not.
    settings = [Setting("REKLS", dtype=torch.float64), Setting("REKLS", "high")]
    r = training_experiment(settings, seeds=(0,), steps=70, shape=(32, 16), batch=64)
    rows = {row["setting"]: row for row in training_table(r)}
    assert rows["REKLS float64"]["peak (max)"] < 2 * rows["REKLS float64"]["before spike"]
    assert rows["REKLS high"]["peak (max)"] > 10 * rows["REKLS float64"]["peak (max)"]


def test_training_is_deterministic_and_restores_precision():
    before = current_matmul_precision()
    kw = {"seeds": (1,), "steps": 8, "spike_step": 4, **SMALL}
    a = training_experiment([Setting("SOAP", "high")], **kw)
    b = training_experiment([Setting("SOAP", "high")], **kw)
    assert torch.equal(a.losses["SOAP high"], b.losses["SOAP high"])
    assert current_matmul_precision() == before


def test_fork_continues_exactly_like_the_original():
    problem = Regression(shape=(8, 4), batch=16, seed=2)
    run = _Trainer(Setting("REKLS", dtype=torch.float64), problem, lr=0.1, eps=1e-8)
    for _ in range(5):
        run.advance()
    twin = run.fork()
    assert [run.advance() for _ in range(4)] == [twin.advance() for _ in range(4)]
    assert twin.opt.dtype == torch.float64  # the options survive the copy


def test_training_table_and_errors():
    r = training_experiment([Setting("SOAP")], seeds=(0, 1), steps=6, spike_step=3, **SMALL)
    (row,) = training_table(r)
    curves = r.losses["SOAP highest"]
    assert row["peak (max)"] == curves[:, 4:].max().item()
    assert row["final (mean)"] == pytest.approx(curves[:, -1].mean().item())
    assert training_table(r, at_step=2)[0]["final (max)"] == curves[:, 2].max().item()
    with pytest.raises(ValueError, match="at_step"):
        training_table(r, at_step=7)
    with pytest.raises(ValueError, match="spike_step"):
        training_experiment([Setting("SOAP")], steps=4, spike_step=4)
    with pytest.raises(ValueError, match="setting"):
        training_experiment([], steps=4)
    with pytest.raises(ValueError, match="lr"):
        training_experiment([Setting("SOAP")], steps=4, spike_step=None, lr=math.nan)


@pytest.mark.parametrize(
    "module", ["kl_methods", "training", "transient", "diagnosis", "training_plots", "scale"]
)
def test_docstring_examples_run(module):
    import matplotlib

    matplotlib.use("Agg")
    mod = importlib.import_module(f"eigprec_book.chapters.degeneracy.{module}")
    result = doctest.testmod(mod, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0


def test_experiment_kwargs_scale_up_with_eigprec_scale_full(monkeypatch):
    from eigprec_book.chapters.degeneracy.failure_map import failure_map_experiment
    from eigprec_book.chapters.degeneracy.mlp import mlp_experiment
    from eigprec_book.chapters.degeneracy.practice import practice_experiment
    from eigprec_book.chapters.degeneracy.real_model import lm_experiment
    from eigprec_book.chapters.degeneracy.scale import EXPERIMENTS, experiment_kwargs
    from eigprec_book.chapters.degeneracy.transient import (
        sensitivity_experiment,
        transient_experiment,
    )

    monkeypatch.delenv("EIGPREC_SCALE", raising=False)
    small = {name: experiment_kwargs(name) for name in EXPERIMENTS}
    monkeypatch.setenv("EIGPREC_SCALE", "full")
    big = {name: experiment_kwargs(name) for name in EXPERIMENTS}
    assert len(big["training"]["seeds"]) > len(small["training"]["seeds"]) >= 5
    assert len(small["practice"]["seeds"]) >= 5  # the advice rests on these runs
    # the peak comes 20-40 steps after the spike at step 50
    assert min(small[name]["steps"] for name in ("training", "practice")) >= 100
    assert len(big["cost"]["settings"]) == 2 * len(small["cost"]["settings"])
    assert small["cost"]["spike_step"] is None and small["cost"]["steps"] == 200
    assert len(big["sensitivity"]["eps"]) == 9
    assert len(small["mlp"]["seeds"]) >= 5 and big["mlp"]["steps"] > small["mlp"]["steps"]
    # The failure map: five seeds per cell, at least the four axes of issue 37 at full scale.
    assert len(small["failure_map"]["seeds"]) >= 5
    assert len(big["failure_map"]["layers"]) > len(small["failure_map"]["layers"])
    assert {lr for _, lr in big["failure_map"]["layers"]} == {0.1, 0.01, 0.001}
    # The small transformer: five seeds at chapter scale, more seeds and arms at full scale.
    assert len(small["real_model"]["seeds"]) >= 5
    assert set(small["real_model"]["arms"]) < set(big["real_model"]["arms"])
    # Every key is an argument of the function it is meant for.
    import inspect

    for name, fn in (
        ("training", training_experiment),
        ("cost", training_experiment),
        ("transient", transient_experiment),
        ("sensitivity", sensitivity_experiment),
        ("practice", practice_experiment),
        ("mlp", mlp_experiment),
        ("failure_map", failure_map_experiment),
        ("real_model", lm_experiment),
    ):
        assert set(big[name]) <= set(inspect.signature(fn).parameters)
        assert set(small[name]) <= set(inspect.signature(fn).parameters)
    with pytest.raises(ValueError, match="experiment"):
        experiment_kwargs("everything")


def test_quick_scale_runs_one_seed_and_two_grid_points(monkeypatch):
    # make test's Colab check (EIGPREC_SCALE=quick): one seed of each multi-seed experiment and
    # two points of the transient and sensitivity grids (subsets of the chapter's), every
    # other argument as at chapter scale, so the reader's notebook runs every line.
    import inspect

    from eigprec_book.chapters.degeneracy.scale import EXPERIMENTS, experiment_kwargs
    from eigprec_book.chapters.degeneracy.transient import (
        sensitivity_experiment,
        transient_experiment,
    )

    monkeypatch.delenv("EIGPREC_SCALE", raising=False)
    chapter = {name: experiment_kwargs(name) for name in EXPERIMENTS}
    monkeypatch.setenv("EIGPREC_SCALE", "quick")
    quick = {name: experiment_kwargs(name) for name in EXPERIMENTS}
    assert quick == {name: experiment_kwargs(name, quick=True) for name in EXPERIMENTS}
    grids = {"transient": ("spike_steps",), "sensitivity": ("eps", "scales")}
    defaults = {
        "transient": inspect.signature(transient_experiment).parameters,
        "sensitivity": inspect.signature(sensitivity_experiment).parameters,
    }
    for name in EXPERIMENTS:
        if name in ("training", "practice", "mlp", "failure_map", "real_model"):
            assert len(chapter[name]["seeds"]) >= 5 and quick[name]["seeds"] == (0,)
        assert quick[name].get("seeds", (0,)) == chapter[name].get("seeds", (0,))[:1]
        for key in grids.get(name, ()):
            full_grid = chapter[name].get(key, defaults[name][key].default)
            assert len(quick[name][key]) == 2 and set(quick[name][key]) < set(full_grid)
        changed = ("seeds", *grids.get(name, ()))
        assert {k: v for k, v in quick[name].items() if k not in changed} == {
            k: v for k, v in chapter[name].items() if k not in changed
        }, name
    monkeypatch.delenv("EIGPREC_SCALE")
    assert experiment_kwargs("practice") == chapter["practice"]
    with pytest.raises(ValueError, match="both asked for"):
        experiment_kwargs("practice", full=True, quick=True)
