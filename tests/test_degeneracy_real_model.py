"""The small transformer of the degeneracy chapter (issue 37, item 4)."""

import doctest

import pytest
import torch
from eigprec_book.chapters.degeneracy import real_model
from eigprec_book.chapters.degeneracy.real_model import JUMP, TinyLM, lm_experiment
from eigprec_book.record.degeneracy_remedies import load_lm_record, record_lm

from eigprec.precision import current_matmul_precision

SMALL = TinyLM(vocab=16, width=8, ffn=16, context=6, batch=4)
SHORT = {"spike_step": 3, "window": 2, "model": SMALL}


def test_docstring_examples_run():
    result = doctest.testmod(real_model)
    assert result.attempted > 0 and result.failed == 0


def test_weights_and_data_come_from_the_seed_alone():
    a, b = SMALL.model(torch.float32), SMALL.model(torch.float32)
    for (n, p), (_, q) in zip(a.named_parameters(), b.named_parameters(), strict=True):
        assert torch.equal(p, q), n
    assert torch.equal(SMALL.tokens(3), SMALL.tokens(3))
    assert not torch.equal(SMALL.tokens(3), SMALL.tokens(4))
    other = TinyLM(**{**SMALL.__dict__, "seed": 1})
    assert not torch.equal(other.model(torch.float32).embed.weight, a.embed.weight)
    # The source's rows are distributions.
    torch.testing.assert_close(
        SMALL.transitions().sum(1), torch.ones(16, dtype=torch.float64), rtol=0, atol=1e-12
    )


def test_the_mask_is_causal():
    net = SMALL.model(torch.float64)
    tokens = SMALL.tokens(0)[:, :-1]
    changed = tokens.clone()
    changed[:, -1] = (changed[:, -1] + 1) % 16
    with torch.no_grad():
        a, b = net(tokens), net(changed)
    torch.testing.assert_close(a[:, :-1], b[:, :-1])  # earlier positions do not see the last
    assert not torch.allclose(a[:, -1], b[:, -1])


def test_rows_ratios_and_clip():
    before = current_matmul_precision()
    r = lm_experiment(arms=("highest", "float64"), seeds=(0, 1), clip=1.0, **SHORT)
    assert current_matmul_precision() == before
    assert [row["arm"] for row in r.rows] == ["float64", "highest"] * 2
    f64 = [row for row in r.rows if row["arm"] == "float64"]
    assert all(row["ratio"] == 1.0 and row["jump ratio"] == 1.0 for row in f64)
    for row in r.rows:
        assert row["jump"] == pytest.approx(row["peak"] / row["before"])
        # A ×1000 spike on one of many layers passes a global clip at 1 far below ×1000.
        assert 0 < row["clipped spike"] < 1000
    s = r.summary()
    assert [x["arm"] for x in s] == ["float64", "highest"]
    assert s[0]["jumped"] == sum(row["jump"] > JUMP for row in f64)
    unclipped = lm_experiment(arms=("float64",), seeds=(0,), clip=None, **SHORT)
    assert unclipped.rows[0]["clipped spike"] == pytest.approx(1000, rel=0.6)


@pytest.mark.parametrize(
    "kwargs, err",
    [
        ({"arms": ("highest",)}, ValueError),
        ({"arms": ("float64", "bf16")}, ValueError),
        ({"seeds": ()}, ValueError),
        ({"spiked": "norm.weight"}, ValueError),
        ({"spiked": "nothing"}, ValueError),
        ({"spike": 0.0}, ValueError),
        ({"clip": -1.0}, ValueError),
        ({"spike_step": 0}, ValueError),
        ({"window": 1.5}, TypeError),
        ({"lr": "big"}, TypeError),
        ({"remedy": "prayer"}, ValueError),
    ],
)
def test_bad_input_is_refused_before_any_training(kwargs, err, monkeypatch):
    monkeypatch.setattr(real_model, "_train", lambda *a: pytest.fail("trained"))
    with pytest.raises(err):
        lm_experiment(**{**SHORT, **kwargs})


def test_model_sizes_are_checked():
    with pytest.raises(ValueError, match="multiple"):
        TinyLM(width=10, heads=3)
    with pytest.raises(ValueError):
        TinyLM(vocab=0)


def test_record_round_trip(tmp_path):
    import json

    runs = {
        "lrs": (0.01,),
        "clips": (None, 1.0),
        "remedies": ("one-sided",),
        "seeds": (0,),
        "arms": ("float64", "highest"),
    }
    record = record_lm(runs, model=SMALL, spike_step=3, window=2)
    assert [(r["lr"], r["clip"], r["remedy"]) for r in record["runs"]] == [
        (0.01, None, "none"),
        (0.01, 1.0, "none"),
        (0.01, None, "one-sided"),
    ]
    path = tmp_path / "lm.json"
    path.write_text(json.dumps(record))
    assert load_lm_record(path)["runs"][1]["summary"][1]["arm"] == "highest"
    path.write_text(json.dumps({**record, "runs": [{"lr": 0.01}]}))
    with pytest.raises(ValueError, match="lacks"):
        load_lm_record(path)


def test_a_remedy_changes_every_arm_but_the_float64_reference():
    kw = {**SHORT, "arms": ("float64", "highest"), "seeds": (0,)}
    plain = lm_experiment(**kw)
    cured = lm_experiment(**kw, remedy="one-sided")
    assert cured.config["remedy"] == "one-sided"
    assert cured.curves[("float64", 0)] == plain.curves[("float64", 0)]
    assert cured.curves[("highest", 0)] != plain.curves[("highest", 0)]


def test_curve_plot_is_readable_and_marks_the_spike():
    from eigprec_book.chapters.degeneracy import real_model_plots
    from eigprec_book.chapters.degeneracy.real_model_plots import plot_lm_curves
    from eigprec_book.helpers import check_readable

    assert doctest.testmod(real_model_plots).failed == 0
    r = lm_experiment(arms=("float64", "high rna"), seeds=(0, 1), **SHORT)
    fig = plot_lm_curves(r)
    check_readable(fig)
    ax = fig.axes[0]
    assert len(ax.lines) == 4 + 2 + 1  # a line per run, a legend entry per arm, the spike
    assert ax.get_xlabel() and ax.get_ylabel()
    assert [t.get_text() for t in ax.get_legend().get_texts()][:2] == ["float64", "high rna"]
    # By default the axis starts 10 steps before the spike (here at the run's start).
    assert ax.lines[0].get_xdata()[0] == 1
    late = plot_lm_curves(r, before=1).axes[0]
    assert late.lines[0].get_xdata()[0] == SHORT["spike_step"]  # the loss after step 3 - 1
    with pytest.raises(ValueError, match="before"):
        plot_lm_curves(r, before=-1)
