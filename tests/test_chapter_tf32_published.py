"""eigprec_book.chapters.tf32.published: the published GPU table and the emulator beside it."""

from __future__ import annotations

import doctest

import eigprec_book.chapters.tf32.published as pb
import pytest
import torch
from eigprec_book.chapters.tf32.experiments import TABLE_INDICES, build_qtlq_problem, diag_qtlq


def test_published_table_is_the_chapters_problem():
    # the same thirteen indices, and the published float32 column agrees with this
    # package's float32 run to accumulation level (tail) or all printed digits (head):
    # the two pages build one L
    assert tuple(pb.PUBLISHED_QTLQ) == TABLE_INDICES
    big_l, q, _ = build_qtlq_problem()
    fp32 = diag_qtlq(big_l, q)
    for i, (gpu_fp32, _) in pb.PUBLISHED_QTLQ.items():
        assert abs(gpu_fp32 - float(fp32[i])) <= max(0.02, 5e-5 * abs(gpu_fp32)), i


def test_emulated_rna_reproduces_the_published_gpu_column():
    big_l, q, lam = build_qtlq_problem()
    cmp = pb.compare_published_qtlq(pb.diag_qtlq_roundings(), diag_qtlq(big_l, q), lam)
    diff = cmp["tail_diff"]
    # ties away agrees to accumulation level (the size of float32-vs-float32 differences);
    # ties to even and truncation do not
    assert diff["rna"] < 2 * cmp["fp32_tail_diff"]
    assert diff["rne"] > 20 * diff["rna"] and diff["rz"] > 1000 * diff["rna"]
    assert cmp["head_digits"]["rna"] == cmp["n_head"] == 5 and cmp["head_digits"]["rz"] == 0


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="roundings"):
        pb.diag_qtlq_roundings(("nearest",))
    with pytest.raises(ValueError, match="128"):
        pb.compare_published_qtlq({"rna": torch.zeros(16)}, torch.zeros(16), torch.zeros(16))


def test_doctests():
    assert doctest.testmod(pb).failed == 0
