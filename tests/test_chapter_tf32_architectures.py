"""The TF32 chapter's four architectures (eigprec_book.chapters.tf32.architectures, issue 36).

transformers comes with the book extra and requirements.txt (`make env`); where it is
missing, the tests that build a model skip and say so, and the rest still run.
"""

import doctest
import importlib.util
import re
import sys
import tomllib
from pathlib import Path

import pytest
import torch
from eigprec_book.chapters.tf32 import architectures as arch
from eigprec_book.chapters.tf32 import architectures_report as arep

from eigprec.precision import current_matmul_precision

ROOT = Path(__file__).resolve().parents[1]

needs_transformers = pytest.mark.skipif(
    importlib.util.find_spec("transformers") is None,
    reason="transformers is not installed (the book's package, eigprec-book, needs it: make env)",
)


def test_transformers_is_a_dependency_of_the_book_package_and_pinned():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    book_project = tomllib.loads((ROOT / "bookpkg" / "pyproject.toml").read_text())["project"]
    book = {re.split(r"[<>=\[; ]", d)[0].lower() for d in book_project["dependencies"]}
    assert "transformers" in book
    assert "transformers" not in {re.split(r"[<>=\[; ]", d)[0] for d in project["dependencies"]}
    pins = re.findall(r"^transformers==\S+$", (ROOT / "requirements.txt").read_text(), re.M)
    assert len(pins) == 1, "requirements.txt pins transformers once (make env installs it)"


def test_a_missing_transformers_is_named_with_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(ImportError, match="eigprec-book"):
        arch.build_architecture("gpt2")


def test_unknown_names_are_refused():
    with pytest.raises(ValueError, match="name must be one of"):
        arch.build_architecture("lstm")


@pytest.mark.parametrize(
    ("module", "op", "family"),
    [
        ("resnet.embedder.embedder.convolution", "convolution", "convolution"),
        (
            "vit.embeddings.patch_embeddings.projection",
            "convolution_backward[weight]",
            "convolution",
        ),
        ("lm_head", "mm", "head"),
        ("cls.predictions.decoder", "addmm", "head"),
        ("classifier.1", "addmm", "head"),
        ("transformer.h.1.attn", "bmm", "attention QKᵀ, PV"),
        ("bert.encoder.layer.0.attention.self", "bmm", "attention QKᵀ, PV"),
        ("vit.layers.0.attention", "bmm", "attention QKᵀ, PV"),
        ("transformer.h.0.attn.c_attn", "addmm", "attention projections"),
        ("bert.encoder.layer.0.attention.self.query", "addmm", "attention projections"),
        ("vit.layers.1.attention.o_proj", "addmm", "attention projections"),
        ("transformer.h.0.mlp.c_fc", "addmm", "MLP"),
        ("bert.encoder.layer.1.intermediate.dense", "addmm", "MLP"),
        ("bert.encoder.layer.1.output.dense", "addmm", "MLP"),
        ("", "mm", "other"),
    ],
)
def test_product_families(module, op, family):
    assert arch.product_family(module, op) == family


@needs_transformers
def test_doctests():
    assert doctest.testmod(arch).failed == 0
    assert doctest.testmod(arep).failed == 0


@needs_transformers
@pytest.mark.parametrize("name", arch.ARCHITECTURES)
def test_build_is_seeded_and_leaves_the_global_generator_alone(name):
    torch.manual_seed(123)
    state = torch.random.get_rng_state()
    first, batch = arch.build_architecture(name, seed=3)
    assert torch.equal(state, torch.random.get_rng_state())
    second, again = arch.build_architecture(name, seed=3)
    other, _ = arch.build_architecture(name, seed=4)
    pairs = zip(first.parameters(), second.parameters(), strict=True)
    assert all(torch.equal(a, b) for a, b in pairs)
    assert any(
        not torch.equal(a, b) for a, b in zip(first.parameters(), other.parameters(), strict=True)
    )
    assert batch.keys() == again.keys() and all(torch.equal(batch[k], again[k]) for k in batch)
    assert all(p.dtype == torch.float32 for p in first.parameters()) and first.training


@needs_transformers
@pytest.mark.parametrize("name", arch.ARCHITECTURES)
def test_the_audit_sees_every_product_by_family(name):
    found = arch.audit_architecture(name)
    records = found.training.records + found.evaluation.records
    assert not found.training.not_covered and not found.evaluation.not_covered  # eager attention
    assert {r.phase == "forward" for r in found.training.records} == {True, False}
    assert all(r.phase == "forward" for r in found.evaluation.records)
    families = {arch.product_family(r.module, r.op) for r in records}
    assert "other" not in families
    expected = {"convolution", "head"} if name == "resnet" else {"head", "MLP"}
    assert expected <= families
    if name != "resnet":
        assert {"attention QKᵀ, PV", "attention projections"} <= families


@needs_transformers
def test_effects_compare_high_with_float32_and_float32_with_float64():
    effects = arch.tf32_effects("gpt2")
    assert set(effects) == {"high", "float32"}
    assert set(effects["high"]) == {"logits", "loss", "gradients"}
    assert all(effects["float32"][k] < effects["high"][k] for k in ("logits", "gradients"))
    assert set(arch.tf32_effects("gpt2", float64=False)) == {"high"}
    with pytest.raises(ValueError, match="has no TF32"):
        arch.tf32_effects("gpt2", emulated=False)
    assert current_matmul_precision() == "highest"


@needs_transformers
def test_highest_for_the_whole_model_removes_the_change_and_restores_the_precision():
    assert arep.highest_for("gpt2", ("",)) == 0.0  # "" is the model itself
    assert arep.highest_for("gpt2", ()) > 0.0
    assert current_matmul_precision() == "highest"


@needs_transformers
def test_forward_flops_count_the_output_layer():
    flops = arep.forward_flops("gpt2")
    tokens = 4 * 32
    assert flops["lm_head"] == 2 * tokens * 64 * 512  # (tokens × 64) @ (64 × vocab)
    assert flops[""] == flops["transformer"] + flops["lm_head"]


@needs_transformers
def test_attribution_refuses_unknown_outputs():
    with pytest.raises(ValueError, match="output must be"):
        arch.architecture_attribution("gpt2", output="loss")
