"""Tests for ``python -m eigprec_book.record eig`` and the side-by-side timer."""

from __future__ import annotations

import copy
import json
import math

import pytest
import torch
from eigprec_book.record.cli import COMMANDS, build_parser, main

from eigprec.timing import time_side_by_side

from .conftest import once_per_run


def test_eig_subcommand_registered():
    assert COMMANDS["eig"][0] == "eigprec_book.record.eig"


def test_eig_refuses_clearly_without_cuda(tmp_path, capsys, monkeypatch):
    # On stderr, as the other recorders' refusals (issue 47, item 13: it was on stdout).
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    out = tmp_path / "eig_gpu.json"
    assert main(["eig", "--out", str(out)]) == 2
    captured = capsys.readouterr()
    assert "no CUDA GPU" in captured.err and captured.out == ""
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
    # one warm-up round, two timed rounds (no hidden sizing call since issue 35)
    assert calls == ["a", "b"] * 3 and set(t) == {"a", "b"}


@pytest.fixture(scope="module")
def cpu_record(tmp_path_factory):
    return once_per_run(tmp_path_factory, "eig-cpu-record", _cpu_record)


def _cpu_record():
    # No GPU here: the recorder's whole bookkeeping on the CPU, with tiny sizes, so the JSON
    # layout, the derived ratios and the report are exercised before a GPU run needs them.
    from eigprec_book.record import eig as bench_eig

    return bench_eig.record(
        device="cpu", sizes=(5, 100), batches=(3, 500), max_repeats=2, per_candidate_s=0.01
    )


def test_eig_record_on_cpu_has_the_schema_and_says_what_it_skipped(cpu_record):
    from eigprec_book.record import eig as bench_eig

    rec = cpu_record
    bench_eig.validate_record(rec)
    assert rec["settings"]["backends"] == ["torch"] and rec["provenance"]["device"] == "cpu"
    assert (rec["grid"][0]["n"], rec["grid"][0]["batch"]) == (100, 500)  # headline first
    assert len(rec["grid"]) == 4 and rec["headline"]["forward_speedup"] > 0
    row = rec["grid"][0]
    assert set(row["train_over_forward"]) == {
        "torch/eigenvector",
        "torch/mean",
        "torch/inverse_iteration",
    }
    for key, ratio in row["train_over_forward"].items():
        sub = key.split("/")[1]
        name = (
            "invit[torch]+backward" if sub == "inverse_iteration" else f"kth[torch]+backward[{sub}]"
        )
        assert ratio == pytest.approx(row["seconds"][name] / row["seconds"]["kth[torch]"])
    whats = " ".join(s["what"] for s in rec["skipped"])
    assert "cupy" in whats and "stream race" in whats
    assert rec["stream_race"] is None and rec["cupy_solver_status"] is None
    assert [(s["n"], s["batch"]) for s in rec["sweep"]] == [(5, 3), (100, 3), (5, 500), (100, 500)]
    assert sum(b["count"] for b in rec["inverse_iteration"]["bins"]) == 500
    json.dumps(rec, allow_nan=False)  # strict JSON, as write_record demands


def test_eig_validate_record_rejects(cpu_record):
    from eigprec_book.record import eig as bench_eig

    bad = copy.deepcopy(cpu_record)
    del bad["grid"][0]["seconds"]["torch.eigvalsh"]
    with pytest.raises(ValueError, match="lacks candidates"):
        bench_eig.validate_record(bad)
    bad = copy.deepcopy(cpu_record)
    bad["grid"][0]["seconds"]["torch.eigvalsh"] = 0.0
    with pytest.raises(ValueError, match="not a positive number"):
        bench_eig.validate_record(bad)
    bad = copy.deepcopy(cpu_record)
    bad["skipped"].append({"what": "x"})
    with pytest.raises(ValueError, match="'what' and 'why'"):
        bench_eig.validate_record(bad)
    no_cupy = {k: v for k, v in cpu_record["provenance"].items() if k != "cupy"}
    with pytest.raises(ValueError, match=r"missing provenance\.cupy"):
        bench_eig.validate_record({**cpu_record, "provenance": no_cupy})


def test_eig_report_prints_the_goals(cpu_record, capsys):
    from eigprec_book.record import eig as bench_eig

    bench_eig.report(cpu_record)
    text = capsys.readouterr().out
    assert "forward speed-up vs torch.linalg.eigvalsh [torch]" in text
    assert "fwd+bwd / fwd [torch/inverse_iteration]" in text and "skipped" in text


def test_eig_grid_stops_at_the_deadline():
    from eigprec_book.record import eig as bench_eig

    rows, skipped = bench_eig.measure_grid(
        [(4, 2), (5, 2)], ["torch"], device="cpu", max_repeats=1, budget_s=0.01, deadline=0.0
    )
    assert rows == [] and [s["what"] for s in skipped] == ["n=4, batch=2", "n=5, batch=2"]


def test_eig_grid_leaves_out_what_would_overrun():
    import time

    from eigprec_book.record import eig as bench_eig

    t0 = time.monotonic()
    rows, skipped = bench_eig.measure_grid(
        [(4, 2), (4, 10**7)], ["torch"], device="cpu", max_repeats=1, budget_s=0.01,
        deadline=time.monotonic() + 60,
    )  # fmt: skip
    assert [(r["n"], r["batch"]) for r in rows] == [(4, 2)]
    assert skipped[0]["what"] == "n=4, batch=10000000" and "would not fit" in skipped[0]["why"]
    assert time.monotonic() - t0 < 30


def test_eig_parser_defaults_and_validation():
    from eigprec_book.record import eig as bench_eig

    args = build_parser().parse_args(["eig", "--out", "x.json"])
    assert tuple(args.sizes) == bench_eig.SIZES == (16, 32, 33, 45, 64, 100)
    assert tuple(args.batches) == bench_eig.BATCHES == (100, 500, 2000)
    assert build_parser().parse_args(["eig", "--out", "x", "--sizes", "8,9"]).sizes == [8, 9]
    with pytest.raises(SystemExit):
        build_parser().parse_args(["eig", "--out", "x", "--sizes", "0,9"])
    assert main(["eig", "--out", "x.json", "--repeats", "0"]) == 2


def test_inverse_iteration_variant_is_one_pointer(monkeypatch):
    from eigprec_book.record import eig as bench_eig

    from eigprec.eig import kth_eigvalsh

    g = torch.Generator().manual_seed(0)
    B = torch.randn(4, 6, 6, generator=g, dtype=torch.float64)
    A = (B + B.mT).requires_grad_(True)
    bench_eig.inverse_iteration(A, -1, "torch").sum().backward()
    X = A.detach().requires_grad_(True)
    kth_eigvalsh(X, -1, backend="torch", method="inverse_iteration").sum().backward()
    assert torch.equal(A.grad, X.grad)
    calls = []

    def with_method(A, k, *, backend="auto", method="exact"):
        calls.append(method)
        return A.sum()

    monkeypatch.setattr(bench_eig, "kth_eigvalsh", with_method)
    bench_eig.inverse_iteration(torch.eye(2), -1, "torch")
    assert calls == ["inverse_iteration"]


def test_time_side_by_side_times_every_round_it_is_asked_for():
    # Regression: an unlimited budget once sized the rounds as inf // seconds = NaN, which
    # max/min turned into a single timed call, so every "median of N rounds" was one round.
    calls = {"a": 0, "b": 0}
    fns = {name: (lambda name=name: calls.__setitem__(name, calls[name] + 1)) for name in calls}
    time_side_by_side(fns, repeats=5, warmup=2)
    assert calls == {"a": 7, "b": 7}  # 2 warm-up rounds, 5 timed rounds


def test_time_interleaved_fits_repeats_to_the_budget():
    from eigprec.timing import time_interleaved

    cost = {"slow": 2.0, "fast": 0.01}
    calls = {"slow": 0, "fast": 0}
    fns = {name: (lambda name=name: calls.__setitem__(name, calls[name] + 1)) for name in cost}

    def clock(fn):  # a fake clock: each candidate takes its fixed time
        fn()
        return cost[next(n for n in cost if fns[n] is fn)]

    t = time_interleaved(fns, clock=clock, warmup=2, max_repeats=7, budget_s=1.0)
    assert t["slow"] == {"seconds": 2.0, "repeats": 1}
    assert t["fast"] == {"seconds": 0.01, "repeats": 7}
    assert calls == {"slow": 3, "fast": 9}  # 2 warm-up calls each, then the timed ones
    kept = time_interleaved(
        fns, clock=clock, warmup=1, max_repeats=3, budget_s=math.inf, keep_samples=True
    )
    assert kept["slow"]["samples"] == [2.0, 2.0, 2.0]  # one per round, in round order
    assert kept["fast"] == {"seconds": 0.01, "repeats": 3, "samples": [0.01, 0.01, 0.01]}
    with pytest.raises(ValueError):
        time_interleaved({}, clock=clock)
    with pytest.raises(ValueError):
        time_interleaved(fns, clock=clock, budget_s=0)


def test_bench_eig_script_reports_the_mean_cost_and_the_eigvalsh_targets(capsys):
    # issue 24 new-2 and "Done when": the script times "mean" against torch's eigh+backward
    # and the default path, and forward+backward against torch.linalg.eigvalsh, in thread
    # time (one torch thread).
    import importlib.util

    from .conftest import ROOT

    spec = importlib.util.spec_from_file_location("bench_eig", ROOT / "benchmarks" / "bench_eig.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench.thread_time_clock(lambda: sum(range(1000))) >= 0
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        bench.headline(batch=4, n=6, repeats=2)
    finally:
        torch.set_num_threads(threads)
    out = capsys.readouterr().out
    assert "thread CPU time" in out
    for label in (
        "fwd+bwd ÷ torch.linalg.eigvalsh",
        '"mean" fwd+bwd ÷ eigh fwd+bwd',
        '"mean" fwd+bwd ÷ default fwd+bwd',
    ):
        line = next(x for x in out.splitlines() if x.startswith(label))
        assert float(line[len(label) :].split()[0]) > 0, line
