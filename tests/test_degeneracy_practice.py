"""Practitioner knobs of the degeneracy chapter: clipping, update cap, baselines, estimators."""

import doctest
import importlib

import pytest
import torch
from eigprec_book.chapters.degeneracy import practice
from eigprec_book.chapters.degeneracy.kl_methods import EMAEigvalSOAP
from eigprec_book.chapters.degeneracy.practice import Arm, peak_spread, practice_experiment

from eigprec.soap import SOAP

TOY = {"shape": (12, 6), "batch": 16, "steps": 12, "spike_step": 6}


def test_docstring_examples_run():
    for name in (
        "eigprec_book.chapters.degeneracy.practice",
        "eigprec_book.chapters.degeneracy.kl_methods",
    ):
        result = doctest.testmod(importlib.import_module(name))
        assert result.attempted > 0 and result.failed == 0, name


def test_arm_validation_and_labels():
    assert Arm("SOAP", "highest", "high", eigval_dtype=torch.float64, clip=3.0).label == (
        "SOAP highest/high + f64 eigenvalues, clip 3×"
    )
    assert Arm("REKLS", dtype=torch.float64, estimator="ema").label == (
        "REKLS float64 + EMA eigenvalues"
    )
    assert Arm("Adam", "high").label == "Adam"
    for bad, err in (
        ({"method": "Lion"}, ValueError),
        ({"method": "SOAP", "precision": "tf32"}, ValueError),
        ({"method": "SOAP", "dtype": torch.float16}, TypeError),
        ({"method": "SOAP", "estimator": "guess"}, ValueError),
        ({"method": "SOAP", "clip": 0.0}, ValueError),
        ({"method": "SOAP", "max_update_rms": -1.0}, ValueError),
    ):
        with pytest.raises(err):
            Arm(**bad)


def test_arm_builds_the_optimizer_it_names():
    w = torch.nn.Parameter(torch.zeros(4, 2))
    assert isinstance(Arm("Adam").build(w, 0.1, 1e-8), torch.optim.Adam)
    plain = Arm("plain SOAP").build(w, 0.1, 1e-8)
    assert type(plain) is SOAP and not plain.use_kl_shampoo and not plain.use_eigh
    rekls = Arm("REKLS", "high", max_update_rms=1.0, estimator="ema").build(w, 0.1, 1e-8)
    assert isinstance(rekls, EMAEigvalSOAP) and rekls.use_eigh and rekls.max_update_rms == 1.0
    assert rekls.fp32_matmul_prec == "high" and rekls.use_kl_shampoo


def test_experiment_validates_before_running():
    with pytest.raises(ValueError, match="arm"):
        practice_experiment([])
    with pytest.raises(ValueError, match="distinct"):
        practice_experiment([Arm("Adam"), Arm("Adam")])
    with pytest.raises(ValueError, match="grad_scale"):
        practice_experiment([Arm("Adam")], grad_scale=0.0)
    with pytest.raises(ValueError, match="spike_step"):
        practice_experiment([Arm("Adam")], steps=5, spike_step=5)
    with pytest.raises(ValueError, match="clip_beta"):
        practice_experiment([Arm("Adam")], clip_beta=1.0)


def test_clipping_caps_the_spike_and_is_deterministic():
    arms = [Arm("REKLS", dtype=torch.float64), Arm("REKLS", dtype=torch.float64, clip=3.0)]
    a = practice_experiment(arms, seeds=(0, 1), **TOY)
    b = practice_experiment(arms, seeds=(0, 1), **TOY)
    for label in a.losses:
        assert torch.equal(a.losses[label], b.losses[label])
    raw, clipped = (a.losses[arm.label] for arm in arms)
    # identical up to the spike: clipping never bites on these steady gradients
    assert torch.equal(raw[:, : TOY["spike_step"] + 1], clipped[:, : TOY["spike_step"] + 1])
    assert not torch.equal(raw, clipped)


class _Recorder(torch.optim.Optimizer):
    """Records the norm of every gradient it is handed; never moves the parameter."""

    def __init__(self, params):
        super().__init__(params, {})
        self.norms = []

    def step(self, closure=None):
        self.norms.append(torch.linalg.matrix_norm(self.param_groups[0]["params"][0].grad).item())


def test_clip_threshold_is_a_multiple_of_the_running_mean_norm(monkeypatch):
    made = []

    def build(self, param, lr, eps):
        made.append(_Recorder([param]))
        return made[-1]

    monkeypatch.setattr(Arm, "build", build)
    kw = {**TOY, "seeds": (0,), "spike_scale": 1000.0, "clip_beta": 0.5}
    practice_experiment([Arm("SOAP")], **kw)
    practice_experiment([Arm("SOAP", clip=3.0)], **kw)
    raw, clipped = made[0].norms, made[1].norms
    s = TOY["spike_step"]
    assert clipped[:s] == pytest.approx(raw[:s])  # the parameter never moves: same gradients
    # the EMA (β = 0.5, bias-corrected) of the steady norms before the spike
    avg, weight = 0.0, 0.0
    for norm in raw[:s]:
        avg, weight = 0.5 * avg + 0.5 * norm, 0.5 * weight + 0.5
    assert raw[s] > 500 * raw[s - 1]
    assert clipped[s] == pytest.approx(3.0 * avg / weight)
    # the clipped norm, not the spike, enters the running mean afterwards
    assert clipped[s + 1] == pytest.approx(raw[s + 1])


def test_grad_scale_changes_only_the_eps_group_for_adam():
    # Adam is invariant to the gradient scale up to ε: c = 1e-2 changes little at ε = 1e-12
    kw = {**TOY, "spike_step": None, "eps": 1e-12, "seeds": (0,)}
    one = practice_experiment([Arm("Adam", dtype=torch.float64)], **kw)
    small = practice_experiment([Arm("Adam", dtype=torch.float64)], grad_scale=1e-2, **kw)
    assert torch.allclose(one.losses["Adam float64"], small.losses["Adam float64"], rtol=1e-6)
    with pytest.raises(ValueError, match="spike"):
        peak_spread(one)


def test_ema_estimator_never_goes_negative_and_starts_at_init():
    gen = torch.Generator().manual_seed(0)
    w = torch.nn.Parameter(torch.zeros(10, 4))
    opt = EMAEigvalSOAP([w], lr=0.0, use_kl_shampoo=True, use_eigh=True, fp32_matmul_prec="high")
    for k in range(8):
        w.grad = torch.randn(10, 4, generator=gen) * (1000.0 if k == 5 else 1.0)
        opt.step()
        lam_L, lam_R = opt.state[w]["lam_L"], opt.state[w]["lam_R"]
        assert lam_L.shape == (10,) and lam_R.shape == (4,)
        assert (lam_L >= 0).all() and (lam_R >= 0).all()
    with pytest.raises(ValueError, match="init"):
        EMAEigvalSOAP([w], lr=0.1, init=0.0)


def test_module_exports_and_chapter_arms():
    assert set(practice.__all__) == {
        "ESTIMATORS",
        "METHODS",
        "Arm",
        "chapter_arms",
        "peak_spread",
        "practice_experiment",
        "row_spike",
        "training_and_practice",
    }
    arms = practice.chapter_arms()
    assert len({a.label for a in arms}) == len(arms) == 20
    clipped = [a for a in arms if a.clip is not None]
    assert {(a.method, a.clip) for a in clipped} == {
        (m, c) for m in ("SOAP", "REKLS") for c in (10.0, 3.0)
    }
    assert {a.label for a in arms} >= {"Adam", "plain SOAP highest", "REKLS high, clip 3×"}


def test_plot_peak_spread_draws_every_seed_and_refuses_unknown_labels():
    from eigprec_book.chapters.degeneracy.practice_plots import plot_peak_spread

    r = practice_experiment([Arm("Adam"), Arm("SOAP")], seeds=(0, 1, 2), **TOY)
    fig = plot_peak_spread(r, ["SOAP highest", "Adam"])
    dots = [c for c in fig.axes[0].collections if len(c.get_offsets())]
    assert sum(len(c.get_offsets()) for c in dots) == 6
    with pytest.raises(KeyError, match="Lion"):
        plot_peak_spread(r, ["Lion"])


def test_shared_prefix_gives_the_numbers_of_separate_runs():
    # Clipping thresholds that never bite before the spike share one run up to it; one
    # that bites earlier (0.5× the running mean) must be run on its own. Either way the
    # curves are those of runs from step 0, bit for bit.
    arms = [
        Arm("REKLS", "high"),
        Arm("REKLS", "high", clip=10.0),
        Arm("REKLS", "high", clip=3.0),
        Arm("REKLS", "high", clip=0.5),
        Arm("Adam"),
    ]
    shared = practice_experiment(arms, seeds=(0, 1), **TOY)
    alone = practice_experiment(arms, seeds=(0, 1), share_prefix=False, **TOY)
    assert list(shared.losses) == [a.label for a in arms]
    for label in alone.losses:
        assert torch.equal(shared.losses[label], alone.losses[label]), label
    early = alone.losses["REKLS high, clip 0.5×"][:, : TOY["spike_step"] + 1]
    assert not torch.equal(early, alone.losses["REKLS high"][:, : TOY["spike_step"] + 1])


def test_training_and_practice_give_the_separate_experiments_numbers():
    from eigprec_book.chapters.degeneracy.practice import training_and_practice
    from eigprec_book.chapters.degeneracy.training import Setting, training_experiment

    settings = [
        Setting("SOAP", dtype=torch.float64),
        Setting("REKLS", "high"),
        Setting("REKLS", "high", remedy="relative eps"),
        Setting("SOAP", "highest", "high"),
    ]
    arms = [Arm("REKLS", "high", clip=3.0), Arm("Adam")]
    kw = {k: TOY[k] for k in ("steps", "spike_step", "shape")}
    train, prac = training_and_practice(settings, arms, seeds=(0, 1), batch=TOY["batch"], **kw)
    ref_t = training_experiment(settings, seeds=(0, 1), batch=TOY["batch"], **kw)
    ref_p = practice_experiment(arms, seeds=(0, 1), batch=TOY["batch"], **kw)
    assert list(train.losses) == [s.label for s in settings]
    assert list(prac.losses) == [a.label for a in arms]
    for label, curves in ref_t.losses.items():
        assert torch.equal(train.losses[label], curves), label
    for label, curves in ref_p.losses.items():
        assert torch.equal(prac.losses[label], curves), label


def _recipe_runs(init: float, eps: float, steps: int = 6):
    # The same gradients through GramStartSOAP, EMAEigvalSOAP and KLRecipeSOAP (REKLS).
    from eigprec_book.chapters.degeneracy.kl_methods import GramStartSOAP, KLRecipeSOAP

    gen = torch.Generator().manual_seed(3)
    grads = [torch.randn(12, 6, generator=gen, dtype=torch.float64) for _ in range(steps)]
    out = {}
    for cls in (GramStartSOAP, EMAEigvalSOAP, KLRecipeSOAP):
        w = torch.nn.Parameter(torch.zeros(12, 6, dtype=torch.float64))
        kw = {"init": init} if cls is not GramStartSOAP else {}
        opt = cls(
            [w], lr=0.0, eps=eps, use_kl_shampoo=True, use_eigh=True, dtype=torch.float64, **kw
        )
        states = []
        for g in grads:
            w.grad = g.clone()
            opt.step()
            states.append({k: v.clone() for k, v in opt.state[w].items() if torch.is_tensor(v)})
        out[cls.__name__] = states
    return out


def test_kl_recipe_starts_with_the_gram_step_then_keeps_ema_estimates():
    runs = _recipe_runs(init=0.1, eps=1e-8)
    recipe, gram = runs["KLRecipeSOAP"], runs["GramStartSOAP"]
    for key in ("L", "R"):  # step 1: the Gram start, exactly
        assert torch.equal(recipe[0][key], gram[0][key])
    # ... and the estimates take in the Gram increment (bias-corrected β = 0 at step 1, Q = I)
    for key, lam in (("L", "lam_L"), ("R", "lam_R")):
        assert torch.allclose(recipe[0][lam], torch.diagonal(gram[0][key]))
    assert (recipe[-1]["lam_L"] >= 0).all()
    assert not torch.allclose(recipe[-1]["L"], gram[-1]["L"])  # then the EMA estimator


def test_kl_recipe_floors_estimates_at_the_authors_cap_as_well_as_eps():
    from eigprec_book.chapters.degeneracy.kl_methods import KLRecipeSOAP, kl_methods_floor

    w = torch.nn.Parameter(torch.zeros(12, 6))
    opt = KLRecipeSOAP([w], lr=0.1, eps=1e-8)
    assert opt._floor(12, 1e-8) == kl_methods_floor(12) == 1 / 144
    assert opt._floor(12, 1.0) == 1.0
    plain = EMAEigvalSOAP([w], lr=0.1, eps=1e-8)
    assert plain._floor(12, 1e-8) == 1e-8
    # With estimates started far below the cap, the cap is what whitens: the recipe's
    # second factor update differs from the EMA class's, whose floor is eps alone.
    runs = _recipe_runs(init=1e-6, eps=1e-12, steps=3)
    assert not torch.allclose(runs["KLRecipeSOAP"][2]["L"], runs["EMAEigvalSOAP"][2]["L"])


def test_kl_recipe_refuses_a_bad_init():
    from eigprec_book.chapters.degeneracy.kl_methods import KLRecipeSOAP

    w = torch.nn.Parameter(torch.zeros(4, 2))
    with pytest.raises(ValueError, match="init"):
        KLRecipeSOAP([w], lr=0.1, init=-1.0)
