"""Tests of eigprec_book.chapters.tf32.coverage: the coverage table and the emulator's column."""

from __future__ import annotations

import doctest

import eigprec_book.chapters.tf32.coverage as cov


def test_every_probe_of_the_table_is_measured():
    measured = cov.emulator_coverage()
    probes = {row["probe"] for row in cov.TF32_COVERAGE if row["probe"]}
    assert probes == set(measured)
    # the emulator follows a GPU where the package has long claimed it does
    assert measured["mm"] == measured["conv"] == "rounds"
    # float32 on the measured H100 and H200 (issue 34 item 3)
    assert measured["mv"] == measured["vecmat"] == "float32"
    assert set(measured.values()) <= {"rounds", "float32", "float32, with a warning"}
    assert all(row["op"] and row["gpu"] and row["cite"] for row in cov.TF32_COVERAGE)


def test_doctests():
    assert doctest.testmod(cov).failed == 0
