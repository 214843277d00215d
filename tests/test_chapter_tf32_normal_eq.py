"""Tests of eigprec.chapters.tf32.normal_eq: the A/B example of the TF32 chapter."""

from __future__ import annotations

import doctest

import pytest

import eigprec.chapters.tf32.normal_eq as ne


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
