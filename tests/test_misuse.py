"""Issue 12, finding 18 (the rest): misuse that used to end in a raw error or a wrong answer."""

from __future__ import annotations

import threading

import pytest
import torch
from eigprec_book.chapters.degeneracy.experiments import eigvec_rotation_experiment
from eigprec_book.chapters.degeneracy.spike import SpikeConfig, spike_experiment
from eigprec_book.chapters.tf32.experiments import diag_qtlq_experiment
from eigprec_book.helpers import glue, load_record

import eigprec


@pytest.mark.parametrize("name", [3, None, b"x"])
def test_glue_names_must_be_strings(name):
    with pytest.raises(TypeError, match="glue name must be a string"):
        glue(name, 1)


@pytest.mark.parametrize("name", [None, 3, ["a"]])
def test_record_names_must_be_strings(name):
    with pytest.raises(TypeError, match="record name must be a string"):
        load_record(name)


@pytest.mark.parametrize(
    "call",
    [
        lambda: eigvec_rotation_experiment(n=8.0),
        lambda: eigvec_rotation_experiment(trials=2.0),
        lambda: diag_qtlq_experiment(n=16.0),
    ],
)
def test_experiment_sizes_must_be_ints(call):
    with pytest.raises(TypeError, match="must be an int"):
        call()


def test_spike_runs_compare_by_identity():
    cfg = SpikeConfig(shape=(8, 4), steps=4, spike_step=2)
    a, b = spike_experiment(cfg), spike_experiment(cfg)
    assert a == a and a != b  # was: "Boolean value of Tensor ... is ambiguous"


@pytest.mark.parametrize(
    "make",
    [
        lambda: eigprec.matmul_precision("high"),
        lambda: eigprec.emulate_tf32(),
        lambda: eigprec.tf32_audit(),
    ],
    ids=["matmul_precision", "emulate_tf32", "tf32_audit"],
)
def test_context_manager_objects_can_be_entered_again(make):
    before = eigprec.current_matmul_precision()
    cm = make()
    for _ in range(2):
        with cm:
            torch.ones(2, 2) @ torch.ones(2, 2)
    with cm, cm:  # nested re-entry of one object
        pass
    assert eigprec.current_matmul_precision() == before


def test_one_precision_object_used_by_two_threads():
    cm = eigprec.matmul_precision("high")
    errors = []

    def work():
        try:
            for _ in range(20):
                with cm:
                    assert eigprec.current_matmul_precision() == "high"
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and eigprec.current_matmul_precision() == "highest"
