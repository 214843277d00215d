"""Tests of eigprec_book.chapters.tf32.normal_eq: the A/B example of the TF32 chapter."""

from __future__ import annotations

import doctest

import eigprec_book.chapters.tf32.normal_eq as ne
import pytest


def test_attribution_sees_the_gram_matrix_amplified():
    r = ne.normal_equations_ab()
    own = dict(r.audit)
    effect = {("AᵀA" if s.shapes[1][-1] > 1 else "Aᵀb"): s.effect for s in r.attribution.sites}
    assert set(own) == set(effect) == {"AᵀA", "Aᵀb"}
    # the Gram matrix's own error reaches x amplified; TF32 costs x far more than float32
    assert effect["AᵀA"] > 2 * own["AᵀA"]
    assert r.error_tf32 > 100 * r.error_fp32


def test_bad_problem_is_refused():
    with pytest.raises(ValueError, match="m >= n"):
        ne.normal_equations_problem(m=3, n=5)
    with pytest.raises(ValueError, match="cond"):
        ne.normal_equations_problem(cond=0.5)
    with pytest.raises(TypeError):
        ne.normal_equations_problem(m=20.0)


def test_doctests():
    assert doctest.testmod(ne).failed == 0


def test_vector_b_leaves_the_gram_matrix_the_only_tf32_product():
    """With a 1-D b, Aᵀb is a matrix-vector product (float32 on a GPU): AᵀA alone is
    rounded, so it ranks first in both the audit and the A/B run (issue 19.3/19e)."""
    r = ne.normal_equations_ab(vector_b=True)
    assert [label for label, _ in r.audit] == ["AᵀA"]
    assert [s.shapes for s in r.attribution.sites] == [((50, 2000), (2000, 50))]
    assert r.error_tf32 > 10 * r.error_fp32
    _, b = ne.normal_equations_problem(m=40, n=4, vector_b=True)
    assert tuple(b.shape) == (40,)
    with pytest.raises(TypeError, match="vector_b"):
        ne.normal_equations_problem(vector_b=1)
