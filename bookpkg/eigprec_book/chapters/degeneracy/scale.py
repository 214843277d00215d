"""Chapter-scale and full-scale arguments of the degeneracy chapter's experiments.

The chapter must execute in minutes on a 2-core CPU; the publishing build on a GPU sets
``EIGPREC_SCALE=full`` (:func:`eigprec_book.helpers.full_scale`) and runs larger grids. One place
decides both, so the page and its tests agree on what "the chapter's defaults" are.
``make test``'s Colab check sets ``EIGPREC_SCALE=quick`` (:func:`eigprec_book.helpers.quick_scale`):
the multi-seed experiments then run their first seed only and the transient and
sensitivity grids two points each, everything else as at chapter scale, so every line of
a reader's notebook still runs.
"""

from __future__ import annotations

from typing import Any

import torch

from eigprec_book.chapters.degeneracy.training import Setting, chapter_settings

# seed_set: the whole seed sets; experiment_kwargs cuts them at the Colab check's scale itself.
from eigprec_book.helpers import full_scale, quick_scale, seed, seed_set

__all__ = ["EXPERIMENTS", "experiment_kwargs"]

#: The experiments :func:`experiment_kwargs` knows.
#:
#: Example:
#:     >>> EXPERIMENTS[0]
#:     'training'
EXPERIMENTS = (
    "training",
    "cost",
    "transient",
    "sensitivity",
    "diagnosis",
    "practice",
    "spike",
    "mlp",
    "failure_map",
    "real_model",
)


def _three(methods: tuple[str, ...]) -> list[Setting]:
    return [
        s
        for m in methods
        for s in (Setting(m, dtype=torch.float64), Setting(m, "highest"), Setting(m, "high"))
    ]


def experiment_kwargs(
    experiment: str, full: bool | None = None, quick: bool | None = None
) -> dict[str, Any]:
    """Keyword arguments of one experiment at chapter scale, at full scale or at the Colab
    check's.

    Args:
        experiment: One of :data:`EXPERIMENTS`: ``"training"``, ``"cost"`` (both for
            :func:`~eigprec_book.chapters.degeneracy.training.training_experiment`),
            ``"practice"`` (:func:`~eigprec_book.chapters.degeneracy.practice.practice_experiment`),
            ``"transient"``, ``"sensitivity"`` (:mod:`~eigprec_book.chapters.degeneracy.transient`)
            ``"diagnosis"`` (:func:`~eigprec_book.chapters.degeneracy.diagnosis.remedy_diagnosis`)
            ``"spike"`` (the :class:`~eigprec_book.chapters.degeneracy.spike.SpikeConfig`
            fields of the angle experiment) or ``"mlp"``
            (:func:`~eigprec_book.chapters.degeneracy.mlp.mlp_experiment`) or ``"failure_map"``
            (:func:`~eigprec_book.chapters.degeneracy.failure_map.failure_map_experiment`) or
            ``"real_model"`` (:func:`~eigprec_book.chapters.degeneracy.real_model.lm_experiment`).
        full: Full scale; ``None`` reads :func:`eigprec_book.helpers.full_scale`.
        quick: The Colab check's scale: chapter scale with the first seed only (the
            ``"training"``, ``"practice"``, ``"mlp"``, ``"failure_map"`` and ``"real_model"``
            experiments;
            the others run one seed anyway) and two points of the ``"transient"`` and
            ``"sensitivity"`` grids; ``None`` reads :func:`eigprec_book.helpers.quick_scale`.

    Returns:
        A fresh dict of keyword arguments.

    Raises:
        ValueError: on an unknown experiment name, or where both scales are asked for.

    Example:
        >>> experiment_kwargs("cost", full=False)["spike_step"] is None
        True
        >>> experiment_kwargs("practice", full=False, quick=True)["seeds"]
        (0,)
    """
    if experiment not in EXPERIMENTS:
        raise ValueError(f"experiment must be one of {EXPERIMENTS}, got {experiment!r}")
    big = full_scale() if full is None else bool(full)
    small = quick_scale() if quick is None else bool(quick)
    if big and small:
        raise ValueError(
            "full scale (full=True, or EIGPREC_SCALE=full) and the Colab check's scale "
            "(quick=True, or EIGPREC_SCALE=quick) are both asked for; choose one"
        )
    kw = _kwargs(experiment, big)
    if small:
        kw.update(_QUICK.get(experiment, {}))
        if "seeds" in kw:
            kw["seeds"] = kw["seeds"][:1]
    return kw


# The Colab check's grids (quick=True), two points where the chapter has four or five: the
# transient page's spike at steps 600 and 300 alone would cost more than the rest.
_QUICK: dict[str, dict[str, Any]] = {
    "transient": {"spike_steps": (50, 150)},
    "sensitivity": {"eps": (1e-4, 1e-8), "scales": (10.0, 1000.0)},
}


def _kwargs(experiment: str, big: bool) -> dict[str, Any]:
    if experiment == "spike":
        # The basis turns one step after the spike and the angle plots need the 50 steps
        # after it; the full build follows the primer's 200 steps.
        return {"steps": 200 if big else 100, "seed": seed(0)}
    if experiment in ("training", "practice"):
        # Five seeds at both scales: the chapter's advice rests on these runs. The peak comes
        # 20-40 steps after the spike at step 50, so 100 steps are the least that see it.
        kw: dict[str, Any] = {
            "seeds": seed_set(8) if big else seed_set(5),
            "steps": 200 if big else 100,
        }
        if experiment == "training" and not big:
            # The CPU budget: SOAP's eigprec-only remedies run at full scale only.
            kw["settings"] = [
                s
                for s in chapter_settings()
                if s.method == "REKLS" or s.remedy not in ("relative eps", "3xTF32 factor updates")
            ]
        return kw
    if experiment == "cost":
        methods = ("SOAP", "REKLS") if big else ("REKLS",)
        return {
            # The EMA estimator changes the trajectory by design; its cost is the training table.
            "settings": [s for s in chapter_settings(methods) if s.remedy != "EMA eigenvalues"],
            "seeds": seed_set(3) if big else seed_set(1),
            "steps": 200,
            "spike_step": None,
        }
    if experiment == "transient":
        if not big:
            return {"seed": seed(0)}
        return {
            "seed": seed(0),
            "settings": _three(("SOAP", "REKLS")),
            "spike_steps": (50, 100, 150, 200, 300, 450, 600, 800),
            "window": 30,
        }
    if experiment == "mlp":
        from eigprec_book.chapters.degeneracy.mlp import TeacherStudent

        # A 64×32 first layer (the chapter's tall aspect ratio) keeps the page in its CPU
        # budget; the full build trains the default, twice as wide, for longer.
        if big:
            return {"seeds": seed_set(8), "steps": 320, "spike_step": 160}
        return {
            "seeds": seed_set(5),
            "steps": 160,
            "spike_step": 80,
            "problem": TeacherStudent(32, 64, 8, spread=1e6),
            "eval_size": 1024,
        }
    if experiment == "sensitivity":
        if not big:
            return {"seed": seed(0)}
        return {
            "seed": seed(0),
            "settings": _three(("SOAP", "REKLS")),
            "eps": tuple(10.0**-e for e in range(4, 13)),
            "scales": (10.0, 50.0, 100.0, 150.0, 200.0, 300.0, 500.0, 1000.0, 3000.0),
            "window": 30,
        }
    if experiment == "failure_map":
        # Chapter scale: the testbed (128×64, lr 0.1) and one step along each axis the CPU
        # budget allows: a taller and a wide layer at lr 0.1, lr 0.01 at 128×64, spikes of
        # ×1000 and ×10⁴, a 30-step window (the degeneracy pages' 600-s budget; with 40 steps
        # and a ×10 spike as well, every harmed/turned/flagged count on the page came out the
        # same on an AMD EPYC; the map's cell took 192 s then, 114 s now). The full build
        # crosses five shapes with three learning rates and adds spike sizes, seeds and a
        # longer window.
        if big:
            shapes = ((64, 128), (96, 64), (128, 64), (192, 64), (256, 64))
            return {
                "layers": tuple((s, lr) for s in shapes for lr in (0.1, 0.01, 0.001)),
                "spike_scales": (10.0, 100.0, 1000.0, 1e4, 1e5),
                "seeds": seed_set(8),
                "window": 60,
            }
        return {
            "layers": (((128, 64), 0.1), ((256, 64), 0.1), ((64, 128), 0.1), ((128, 64), 0.01)),
            "spike_scales": (1000.0, 1e4),
            "seeds": seed_set(5),
            "window": 30,
        }
    if experiment == "real_model":
        # The small transformer, unclipped, a ×10⁴ spike on its embedding at lr 0.01 after a
        # 20-step warm-up, so that float64 trains before the spike in every seed (without it,
        # the KL start-up left some float64 runs near chance: no reference). Chapter scale:
        # float64 and 'high', spike at step 50 (at step 40 one float64 seed of the second set
        # had not trained yet), a 10-step window; the full build adds 'highest', three more
        # seeds and a longer window. The grid over learning rate and a global clip is the
        # page's record.
        common = {"spike": 1e4, "clip": None, "lr": 0.01, "warmup": 20, "spiked": "embed.weight"}
        if big:
            arms = ("float64", "highest", "high rna")
            return {**common, "arms": arms, "seeds": seed_set(8), "spike_step": 50, "window": 30}
        return {
            **common,
            "arms": ("float64", "high rna"),
            "seeds": seed_set(5),
            "spike_step": 50,
            "window": 10,
        }
    # "diagnosis"
    return {"methods": ("SOAP", "REKLS"), "seed": seed(0)} if big else {"seed": seed(0)}
