"""The eig recorder's CuPy branches, run on the CPU through the fake CuPy (issue 22).

No GPU here: ``kth_eigvalsh(backend="cupy")`` is let through on CPU tensors, so the grid,
the smoke call, the solver-status section and the inverse-iteration trade-off run the real
bridge against ``tests/_fake_cupy.py``; the stream race (CUDA streams and a sleep kernel, no
CuPy-only logic) is replaced by its result's layout. The record's layout, what it says it
skipped, and the torch version it names are checked.
"""

from __future__ import annotations

import json

import pytest
import torch
from eigprec_book.chapters.clarke import speed
from eigprec_book.record import eig as bench_eig

import eigprec.eig
from eigprec.eig import cupy_solver as _cupy_bridge

from ._fake_cupy import FakeCupy, on_fake_gpu

RACE = {"trials": 2, "batch": 8, "n": 16, "naive_wrong": 3, "bridge_wrong": 0}


def _fake_gpu(monkeypatch, fake: FakeCupy) -> FakeCupy:
    on_fake_gpu(monkeypatch, fake)
    monkeypatch.setattr(_cupy_bridge, "cupy_available", lambda: True)
    resolve = eigprec.eig.kth._resolve_backend
    # backend="cupy" insists on CUDA tensors; the fake runs on CPU ones.
    monkeypatch.setattr(
        eigprec.eig.kth,
        "_resolve_backend",
        lambda b, A, *args, **kw: "cupy" if b == "cupy" else resolve(b, A, *args, **kw),
    )
    monkeypatch.setattr(speed, "stream_race_demo", lambda: dict(RACE))
    _small_tradeoff(monkeypatch)
    return fake


def _small_tradeoff(monkeypatch):
    # The trade-off runs at the headline size (500 matrices of 100 x 100): smaller here.
    real = speed.inverse_iteration_tradeoff
    monkeypatch.setattr(
        speed,
        "inverse_iteration_tradeoff",
        lambda **kw: real(**{**kw, "batch": 24, "n": 12, "k": 6}),
    )


def _record(**kw):
    return bench_eig.record(
        device="cpu",
        sizes=(5, 33),
        batches=(3,),
        max_repeats=1,
        per_candidate_s=0.01,
        _cupy_on_cpu=True,
        **kw,
    )


def test_cupy_branches_record_layout(monkeypatch):
    fake = _fake_gpu(monkeypatch, FakeCupy())
    rec = _record()
    bench_eig.validate_record(rec)
    assert rec["cupy_smoke"] == "ok"
    assert rec["settings"]["backends"] == ["cupy", "torch"]
    for row in rec["grid"]:
        assert {"kth[cupy]", "kth[cupy]+backward[mean]", "invit[cupy]+backward"} <= set(
            row["seconds"]
        )
        assert set(row["forward_speedup"]) == {"cupy", "torch"}
    assert [s["backend"] for s in rec["sweep"]] == ["cupy", "cupy"]
    assert rec["stream_race"] == RACE
    status = rec["cupy_solver_status"]
    assert [s["n"] for s in status] == [5, 33]
    for s in status:
        assert s["converged"] == s["batch"] and s["not_converged"] == 0
        assert s["max_residual"] < 1e-5 and s["cupy_default_linalg_mode"] == "ignore"
        assert s["raises_under_errstate"] is None
    assert rec["inverse_iteration"] is not None
    assert not [s for s in rec["skipped"] if "cupy" in s["what"].lower()]
    assert {"ssyevjBatched", "xsyevjSetSortEig"} <= {c[0].rsplit(".", 1)[-1] for c in fake.calls}
    json.dumps(rec, allow_nan=False)


def test_failed_smoke_call_goes_on_torch_only(monkeypatch):
    fake = _fake_gpu(monkeypatch, FakeCupy())

    def broken(*args):
        raise RuntimeError("CUSOLVER_STATUS_INTERNAL_ERROR")

    cusolver = fake.modules["cupy_backends.cuda.libs.cusolver"]
    monkeypatch.setattr(cusolver, "ssyevjBatched", broken)
    rec = bench_eig.record(
        device="cpu", sizes=(5,), batches=(3,), max_repeats=1, per_candidate_s=0.01,
        _cupy_on_cpu=True,
    )  # fmt: skip
    bench_eig.validate_record(rec)
    assert rec["settings"]["backends"] == ["torch"]
    assert rec["cupy_smoke"].startswith("skipped: the smoke call failed")
    assert "CUSOLVER_STATUS_INTERNAL_ERROR" in rec["cupy_smoke"]
    whys = {s["what"]: s["why"] for s in rec["skipped"]}
    assert whys["kth_eigvalsh backend cupy"] == rec["cupy_smoke"]
    assert rec["stream_race"] is None and rec["cupy_solver_status"] is None


@pytest.mark.parametrize(("version", "every_n"), [("2.11.0+cu130", False), ("2.13.0", True)])
def test_record_names_the_installed_torch_and_what_its_eigh_does(monkeypatch, version, every_n):
    monkeypatch.setattr(torch, "__version__", version)
    _small_tradeoff(monkeypatch)
    info = bench_eig.torch_eigh_batching()
    assert info == {
        "torch": version,
        "batched_every_n": every_n,
        "note": info["note"],
    }
    assert version in info["note"] and ("for every n" in info["note"]) == every_n
    assert ("n > 32" in info["note"]) == (not every_n)
    rec = bench_eig.record(
        device="cpu", sizes=(5,), batches=(3,), max_repeats=1, per_candidate_s=0.01
    )
    assert rec["provenance"]["torch"] == rec["torch_eigh"]["torch"] == version
    assert rec["torch_eigh"]["batched_every_n"] is every_n
    bad = {**rec, "torch_eigh": {**rec["torch_eigh"], "torch": "2.0.0"}}
    with pytest.raises(ValueError, match="torch_eigh"):
        bench_eig.validate_record(bad)
