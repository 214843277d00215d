"""Tests for the ``python -m eigprec.bench`` dispatcher and the eig recording command."""

from __future__ import annotations

import pytest
import torch

from eigprec.bench import SUBCOMMANDS
from eigprec.bench.__main__ import main
from eigprec.bench._timing import time_side_by_side


def test_eig_subcommand_registered():
    assert SUBCOMMANDS["eig"] == "eigprec.bench.eig"


def test_eig_refuses_clearly_without_cuda(tmp_path, capsys):
    if torch.cuda.is_available():
        pytest.skip("this test checks the refusal on machines without CUDA")
    out = tmp_path / "eig_gpu.json"
    assert main(["eig", "--out", str(out)]) == 2
    assert "no CUDA GPU" in capsys.readouterr().out
    assert not out.exists()


def test_time_side_by_side_validates_and_measures():
    with pytest.raises(ValueError):
        time_side_by_side({}, repeats=1)
    with pytest.raises(ValueError):
        time_side_by_side({"a": lambda: None}, repeats=0)
    calls = []
    t = time_side_by_side(
        {"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, repeats=2, warmup=1
    )
    assert calls == ["a", "b"] * 3 and set(t) == {"a", "b"}
