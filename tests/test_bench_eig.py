"""Tests for ``python -m eigprec.bench eig`` and the side-by-side timer."""

from __future__ import annotations

import pytest
import torch

from eigprec.bench.cli import COMMANDS, main
from eigprec.timing import time_side_by_side


def test_eig_subcommand_registered():
    assert COMMANDS["eig"][0] == "eigprec.bench.eig"


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


def test_eig_record_and_report_assembly_with_cpu_stand_ins(tmp_path, monkeypatch, capsys):
    # No GPU here: run the recorder's bookkeeping with the experiments redirected to the CPU,
    # so that the JSON layout and the printed report are exercised before a GPU run needs them.
    import json

    from eigprec import _cupy_bridge
    from eigprec.bench import eig as bench_eig
    from eigprec.chapters.clarke import speed as ce

    def on_cpu(fn, **shrink):
        def wrapped(*args, **kw):
            kw.update(device="cpu", backend="torch", **shrink)
            return fn(*args, **kw)

        return wrapped

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(_cupy_bridge, "cupy_available", lambda: True)
    monkeypatch.setattr(bench_eig, "provenance", lambda: {"gpu": "stand-in"})
    monkeypatch.setattr(ce, "timing_sweep", on_cpu(ce.timing_sweep, batches=(4,), sizes=(5,)))
    monkeypatch.setattr(
        ce, "inverse_iteration_tradeoff", on_cpu(ce.inverse_iteration_tradeoff, batch=8, n=6, k=2)
    )
    monkeypatch.setattr(
        ce,
        "stream_race_demo",
        lambda: {"trials": 1, "batch": 1, "n": 1, "naive_wrong": 0, "bridge_wrong": 0},
    )
    out = tmp_path / "eig_gpu.json"
    assert main(["eig", "--out", str(out), "--repeats", "1"]) == 0
    rec = json.loads(out.read_text())
    assert set(rec) == {
        "provenance",
        "headline",
        "targets",
        "sweep",
        "stream_race",
        "inverse_iteration",
    }
    assert rec["headline"]["forward_speedup"] > 0
    text = capsys.readouterr().out
    assert "speed-up" in text and "stream race" in text and "wrote" in text
