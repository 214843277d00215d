"""The complex64 recorder (issue 50, item 3) on the CPU: what the GPU reports is patched in
(a stand-in GPU that rounds the operands' parts by a given rule, or not at all), and the
record must say which rule that was."""

from __future__ import annotations

import argparse
import json

import pytest
import torch
from eigprec_book.record import complex64 as rec
from eigprec_book.record.cli import main

from eigprec.tf32.core import round_bits


def _parts_rounded(t, rule):
    return torch.complex(*(round_bits(p.contiguous(), rule) for p in (t.real, t.imag)))


def _gpu(rule: str | None):
    """A stand-in GPU: with the switch on, both operands' parts rounded by ``rule``."""

    def product(kind, x, y, tf32):
        if tf32 and rule is not None:
            x, y = (_parts_rounded(t, rule) for t in (x, y))
        return (x.to(torch.complex128) @ y.to(torch.complex128)).to(torch.complex64)

    return product


@pytest.mark.parametrize("rule", ["rna", "rne", "rz"])
def test_the_operand_probe_names_the_rule_the_gpu_used(rule):
    probe = rec.operand_probe("cpu", _gpu(rule))
    for kind in rec.KINDS:
        assert probe["on"][kind] == {"first_operand": [rule], "second_operand": [rule]}
        assert probe["off"][kind] == {"first_operand": ["fp32"], "second_operand": ["fp32"]}


def test_a_gpu_that_does_not_round_matches_float32_only():
    probe = rec.operand_probe("cpu", _gpu(None))
    assert all(probe["on"][k]["first_operand"] == ["fp32"] for k in rec.KINDS)
    rows = rec.random_products("cpu", _gpu(None))
    assert not any(r["changed"] for r in rows.values())
    assert all(r["change"] == 0.0 for r in rows.values())


def test_a_kernel_that_sums_parts_first_matches_no_rule():
    def three_products(kind, x, y, tf32):  # (a + b)(c + d) first: not a rounding of parts
        if tf32:
            x = torch.complex(round_bits((x.real + x.imag).contiguous(), "rne") - x.imag, x.imag)
        return (x.to(torch.complex128) @ y.to(torch.complex128)).to(torch.complex64)

    probe = rec.operand_probe("cpu", three_products)
    assert probe["on"]["mm"]["first_operand"] == []


@pytest.mark.parametrize("rule", ["rna", "rne"])
def test_random_products_find_the_rule_and_the_change(rule):
    rows = rec.random_products("cpu", _gpu(rule))
    for kind, r in rows.items():
        assert r["changed"] and r["repeatable"] == {"off": True, "on": True}, kind
        assert 1e-4 < r["change"] < 1e-3  # about TF32's unit roundoff
        assert r["best"] == rule and r["distance"][rule] < 1e-6 < r["distance"]["fp32"]


def test_refuses_without_a_gpu(tmp_path, capsys):
    if torch.cuda.is_available():
        pytest.skip("a CUDA GPU is visible")
    out = tmp_path / "c.json"
    assert main(["complex64", "--out", str(out)]) == 2
    assert "torch.cuda.is_available() is False" in capsys.readouterr().err
    assert not out.exists()


def test_dry_run_writes_a_valid_record(tmp_path):
    out = tmp_path / "c.json"
    assert rec.run(argparse.Namespace(out=str(out), dry_run=True)) == 0
    record = json.loads(out.read_text())
    rec.validate_record(record)
    assert record["dry_run"] is True
    assert record["operands"]["on"]["mm"]["first_operand"] == ["fp32"]  # a CPU: no TF32
    with pytest.raises(ValueError, match="no measurement of 'bmm'"):
        rec.validate_record({**record, "random": {"mm": {}}})
