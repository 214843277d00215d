"""The benchmark scripts run, report a ratio and leave torch's precision settings as found."""

from __future__ import annotations

import importlib.util

import torch

from eigprec import current_matmul_precision

from .conftest import ROOT


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_bench_tf32_restores_the_precision_it_found():
    bench = _load("bench_tf32")
    before = (
        torch.get_float32_matmul_precision(),
        torch.backends.fp32_precision,
        torch.backends.cuda.matmul.fp32_precision,
        torch.backends.mkldnn.matmul.fp32_precision,
    )
    torch.set_float32_matmul_precision("medium")
    try:
        found = (current_matmul_precision(), torch.backends.cuda.matmul.fp32_precision)
        ratio = bench.main(["--size", "32", "--repeats", "2"])
        assert ratio > 0
        assert (current_matmul_precision(), torch.backends.cuda.matmul.fp32_precision) == found
    finally:
        torch.set_float32_matmul_precision(before[0])
        torch.backends.fp32_precision = before[1]
        torch.backends.cuda.matmul.fp32_precision = before[2]
        torch.backends.mkldnn.matmul.fp32_precision = before[3]


def test_bench_eig_pairs_rounds_and_reports_every_target(capsys):
    bench = _load("bench_eig")
    # per-round ratios: a slow round of both candidates cancels out
    mid, lo, hi = bench._paired({"a": [2.0, 40.0, 6.0], "b": [1.0, 20.0, 3.0]}, "a", "b")
    assert (mid, lo, hi) == (2.0, 2.0, 2.0)
    assert bench._paired({"a": [3.0], "b": [2.0]}, "a", "b") == (1.5, 1.5, 1.5)
    bench.headline(batch=4, n=6, repeats=2)
    out = capsys.readouterr().out
    for label in (
        "value ÷ torch.linalg.eigvalsh",
        "fwd+bwd ÷ value (no grad)",
        "fwd+bwd ÷ forward (requires grad)",
        "forward (requires grad) ÷ eigvalsh",
    ):
        line = next(x for x in out.splitlines() if x.startswith(label))
        assert float(line[len(label) :].split()[0]) > 0, line


def test_bench_tf32_emulation_reports_both_ratios_for_every_workload(capsys):
    bench = _load("bench_tf32_emulation")
    ratios = bench.main(["--repeats", "1", "--steps", "5"])
    assert len(ratios) == 4
    for name, got in ratios.items():
        assert set(got) == {"null mode", "emulated"}, name
        assert all(r > 0 for r in got.values()), (name, got)
    out = capsys.readouterr().out
    assert all(name in out for name in ratios)


def test_bench_audit_iteration_is_a_training_script_that_prints_its_iterations(capsys):
    # (the measurement itself starts processes for minutes: run the file to get it)
    bench = _load("bench_audit_iteration")
    bench.main(["--train", "--iterations", "4"])
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 4 and all(line.startswith("ms ") and float(line[3:]) > 0 for line in lines)
