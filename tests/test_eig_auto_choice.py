"""backend="auto" per (batch, n), checked against the rule on a recorded GPU grid (issue 33).

The rule (``eigprec_book.record.eig_rule.acceptable``): at each shape, a solver whose error is
within 10× of the most accurate and whose time is within 1.2× of the fastest of those. The H100
record in ``book/data/eig_gpu.json`` (torch 2.11, CuPy 14.2) holds times only; where a record
has no errors the rule compares times alone.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from eigprec_book.record import eig_rule as _eig_choice
from hypothesis import given, settings
from hypothesis import strategies as st

from eigprec.eig import kth as eig

RECORD = Path(__file__).resolve().parents[1] / "book" / "data" / "eig_gpu.json"


def _cuda_like(batch: int, n: int, dtype=torch.float32):
    return SimpleNamespace(device=torch.device("cuda", 0), shape=(batch, n, n), dtype=dtype)


def test_auto_meets_the_rule_at_every_shape_of_the_h100_record(monkeypatch):
    record = json.loads(RECORD.read_text())
    monkeypatch.setattr(eig, "_cupy_ok", lambda: True)
    monkeypatch.setattr(torch, "__version__", record["provenance"]["torch"])
    rows = _eig_choice.rows_from_timing_grid(record)
    assert len(rows) == len(record["grid"]) == 17
    for row in rows:
        for phase in ("forward", "train"):
            ok = _eig_choice.acceptable(row, phase=phase)
            got = eig._resolve_backend("auto", _cuda_like(row["batch"], row["n"]))
            assert _eig_choice.SOLVER_OF_BACKEND[got] in ok, (row["batch"], row["n"], phase)


def test_auto_leaves_float32_jacobi_where_it_is_inaccurate(monkeypatch):
    # float32 syevjBatched on an H200: max eigenvalue error 6.4e-4 · max|λ| at n = 1024, 5,000×
    # the per-matrix syevd's k-th value error, and slower there (104 vs 77 ms at 8 × 1024).
    monkeypatch.setattr(eig, "_cupy_ok", lambda: True)
    monkeypatch.setattr(torch, "__version__", "2.11.0+cu130")
    for n in (257, 512, 1024, 2048):
        for batch in (1, 8, 4096):
            assert eig._resolve_backend("auto", _cuda_like(batch, n)) == "torch", (batch, n)
    for n in (33, 100, 256):
        assert eig._resolve_backend("auto", _cuda_like(64, n)) == "cupy", n


def _row(errors, times):
    return {
        "n": 8,
        "batch": 1,
        "solvers": {
            name: {"seconds": t, "value_error": e, "residual": e, "orthogonality": e}
            for (name, e), t in zip(errors.items(), times, strict=True)
        },
    }


def test_rule_on_a_constructed_row():
    row = _row({"a": 1e-7, "b": 5e-7, "c": 1e-5}, [1.0, 0.9, 0.1])
    # c is fastest but 100x less accurate; of a and b (within 10x), b is fastest, a within 1.2x
    assert _eig_choice.acceptable(row, phase="forward") == ["a", "b"]
    assert _eig_choice.acceptable(_row({"a": 1e-7, "b": 5e-7}, [1.3, 1.0])) == ["b"]
    with pytest.raises(ValueError, match="no solver"):
        _eig_choice.acceptable({"n": 1, "batch": 1, "solvers": {}})
    with pytest.raises(ValueError, match="phase"):
        _eig_choice.acceptable(row, phase="sideways")


@settings(max_examples=60, deadline=None)
@given(
    errors=st.lists(st.one_of(st.none(), st.floats(1e-12, 1.0)), min_size=1, max_size=5),
    times=st.lists(st.floats(1e-6, 10.0), min_size=5, max_size=5),
)
def test_rule_properties(errors, times):
    names = [f"s{i}" for i in range(len(errors))]
    row = _row(dict(zip(names, errors, strict=True)), times[: len(errors)])
    ok = _eig_choice.acceptable(row, phase="forward")
    assert ok  # never empty: the fastest accurate solver always qualifies
    known = [e for e in errors if e is not None]
    best_err = min(known) if known else None
    fastest = min(t for t, e in zip(times, errors, strict=False) if _close(e, best_err))
    for name in ok:
        i = names.index(name)
        assert _close(errors[i], best_err)
        assert times[i] <= 1.2 * fastest * (1 + 1e-12)


def _close(e, best):
    return e is None or best is None or e <= 10 * best


def test_rows_from_timing_grid_refuses_other_records():
    with pytest.raises(ValueError, match="schema"):
        _eig_choice.rows_from_timing_grid({"schema": "x"})
    assert math.isfinite(_eig_choice.ERROR_FACTOR) and _eig_choice.TIME_FACTOR == 1.2


def test_auto_can_choose_plain_torch_on_every_device(monkeypatch):
    # Issue 49, item 1: plain torch.linalg is one of auto's candidates on every device; where
    # auto picks it, the call is torch.linalg.eigvalsh itself (the thin path), gradient
    # included, with no custom op or autograd.Function in between.
    calls = []
    real = torch.linalg.eigvalsh
    monkeypatch.setattr(torch.linalg, "eigvalsh", lambda *a, **kw: calls.append(1) or real(*a))
    g = torch.Generator().manual_seed(0)
    for batch, n, grad in ((64, 8, False), (1, 8, True), (1, 32, True), (8, 16, True)):
        B = torch.randn(batch, n, n, generator=g)
        A = ((B + B.mT) / 2).requires_grad_(grad)
        calls.clear()
        lam = eig.kth_eigvalsh(A, -1)
        assert calls == [1], (batch, n, grad)
        assert not eig.auto.cpu_uses_subset(n, batch, grad)
        if grad:  # torch's own backward of eigh: its q qᵀ is the "eigenvector" element
            assert type(lam.grad_fn).__name__ == "SelectBackward0"
            (G,) = torch.autograd.grad(lam.sum(), A)
            _, V = torch.linalg.eigh(A.detach())
            q = V[..., -1:]
            torch.testing.assert_close(G, q @ q.mT)
    # CUDA: torch wherever CuPy is not known to help (torch >= 2.12 always, and below that
    # outside the CuPy shapes), and whenever CuPy does not work.
    monkeypatch.setattr(eig, "_cupy_ok", lambda: True)
    for version in ("2.11.0+cu130", "2.13.0+cu130"):
        monkeypatch.setattr(torch, "__version__", version)
        assert eig._resolve_backend("auto", _cuda_like(100, 16)) == "torch"
        assert eig._resolve_backend("auto", _cuda_like(8, 1024)) == "torch"
    monkeypatch.setattr(eig, "_cupy_ok", lambda: False)
    monkeypatch.setattr(torch, "__version__", "2.11.0+cu130")
    assert eig._resolve_backend("auto", _cuda_like(500, 100)) == "torch"
