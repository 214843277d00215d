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
