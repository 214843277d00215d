"""Tests of eigprec_book.chapters.tf32.experiments: the chapter's experiment and its tables."""

from __future__ import annotations

import doctest
import math

import eigprec_book.chapters.tf32.experiments as tx
import pytest
import torch


def test_spectrum_is_the_specified_one():
    lam = tx.qtlq_spectrum()
    assert lam.dtype == torch.float64 and lam.numel() == 128
    head = 2.5e6 * torch.tensor([1, 0.98, 0.96, 0.94, 0.92], dtype=torch.float64)
    assert torch.equal(lam[:5], head)
    tail = torch.logspace(math.log10(0.9 * 2.5e6), -1, 123, dtype=torch.float64)
    assert torch.equal(lam[5:], tail)
    assert (lam[:-1] > lam[1:]).all()


def test_problem_construction():
    big_l, q, lam = tx.build_qtlq_problem()
    assert big_l.dtype == q.dtype == torch.float32
    assert torch.equal(big_l, big_l.T)
    gen = torch.Generator().manual_seed(0)
    q_ref, _ = torch.linalg.qr(torch.randn(128, 128, generator=gen, dtype=torch.float64))
    assert torch.equal(q, q_ref.float())
    recovered = torch.linalg.eigvalsh(big_l.double()).flip(0)
    assert torch.allclose(recovered, lam, rtol=0, atol=2.0)


def test_bad_arguments():
    big_l, q, _ = tx.build_qtlq_problem(n=8, smallest=1.0)
    with pytest.raises(ValueError, match="method"):
        tx.diag_qtlq(big_l, q, "fp16")
    with pytest.raises(TypeError, match="float32"):
        tx.diag_qtlq(big_l.double(), q)
    with pytest.raises(ValueError, match="square"):
        tx.diag_qtlq(big_l[:4], q)
    with pytest.raises(ValueError, match="exceed"):
        tx.qtlq_spectrum(n=5)
    with pytest.raises(ValueError, match="positive"):
        tx.qtlq_spectrum(smallest=0.0)


def test_fp64_method_is_storage_limited():
    res = tx.diag_qtlq_experiment(methods=("fp64", "fp32"))
    assert res.errors("fp64").median() < res.errors("fp32").median()
    assert len(res.table()) == len(tx.TABLE_INDICES)
    assert res.table()[0]["true"] == 2.5e6


def test_tf32_error_is_at_predicted_level_and_nearly_independent_of_lambda():
    res = tx.diag_qtlq_experiment(methods=("tf32",))
    level = tx.predicted_error_level(res.eigenvalues, 2.0**-11)
    err = res.errors("tf32")
    assert level / 4 < err.median() < 4 * level
    # seven orders of magnitude apart, head and tail errors differ by a small factor; the
    # head's is larger (rounding Q adds an error proportional to lambda_i)
    assert 2 < err[:20].median() / err[-20:].median() < 5


def test_median_model_matches_operand_rounding():
    res = tx.diag_qtlq_experiment(methods=("tf32", "fp64", "fp32"))
    lam = res.eigenvalues
    tf32_level = tx.predicted_median_error(lam, 2.0**-11)
    fp32_level = tx.predicted_median_error(lam, 2.0**-24)
    assert tf32_level / 2 < res.errors("tf32").median() < 2 * tf32_level
    # float64 arithmetic: only the storage of L and Q in float32 rounds
    assert fp32_level / 2 < res.errors("fp64").median() < 2 * fp32_level
    # float32 arithmetic adds the rounding of the sums, which the model leaves out
    assert res.errors("fp32").median() > 2 * fp32_level
    ratio = tf32_level / tx.predicted_error_level(lam, 2.0**-11)
    assert abs(ratio - 0.6745 / 3**0.5) < 1e-4


def test_remedies():
    errs = tx.remedies_experiment()
    assert torch.equal(errs["tf32 rescaled"], errs["tf32"])
    assert errs["3xtf32"].median() < 2 * errs["fp32"].median()
    assert errs["tf32 deflated"].median() < errs["tf32"].median()
    assert errs["fp64"].median() < errs["fp32"].median()


def test_format_table_matches_torch():
    rows = {r["format"]: r for r in tx.format_table()}
    for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16), ("fp16", torch.float16)):
        assert rows[name]["spacing_at_1"] == torch.finfo(dtype).eps
    assert rows["TF32"]["unit_roundoff"] == 2.0**-11
    assert rows["TF32"]["max"] == (2 - 2**-10) * 2.0**127


def test_rounding_examples_cover_ties():
    rows = {r["what"]: r for r in tx.rounding_examples()}
    assert rows["tie of issue 53635"]["rna"] == 1025.0
    assert rows["subnormal tie"]["rna"] == 2.0**-130 + 2.0**-136
    assert rows["subnormal tie"]["rne"] == 2.0**-130


def test_precision_knobs_restore_state():
    before = (
        torch.backends.cuda.matmul.fp32_precision,
        torch.backends.mkldnn.matmul.fp32_precision,
        torch.backends.fp32_precision,
    )
    knobs = tx.precision_knobs()
    after = (
        torch.backends.cuda.matmul.fp32_precision,
        torch.backends.mkldnn.matmul.fp32_precision,
        torch.backends.fp32_precision,
    )
    assert before == after
    torch.get_float32_matmul_precision()  # coherent again: does not raise
    assert knobs["modes"]["high"]["cublas_uses_tf32"] is True
    assert knobs["modes"]["highest"]["cublas_uses_tf32"] is False


def test_medium_check_reports_counts():
    check = tx.medium_precision_check(n=32)
    assert check["entries"] == 1024
    assert 0 <= check["changed"] <= 1024
    assert check["bf16_operand_error"] > 1e-4  # bf16 operands do lose digits


def test_docstring_examples():
    result = doctest.testmod(tx)
    assert result.attempted > 0 and result.failed == 0
