"""The CPU operator sweep (issue 34, item 2): every float32 operator of PyTorch's OpInfo
database that TF32 leaves alone on a GPU runs bit for bit unchanged under emulate_tf32()
and tf32_audit() at 'high'; the solves TF32 changes are named (NotEmulatedWarning); the
audit never changes a result. The facts: eigprec_book.chapters.tf32.op_sweep.

One sample per operator (op_db's first float32 sample, small tensors). Operators whose
sample fails or differs between two plain runs (random output) are skipped, and so are the
``empty*`` constructors (uninitialised memory, equal or not by chance).
"""

from __future__ import annotations

import itertools
import json
import warnings

import pytest
import torch
from eigprec_book.chapters.tf32.op_sweep import SOLVES, changed_ops, kept_float32
from eigprec_book.record.ops import op_db_float32
from torch.utils._pytree import tree_leaves

from eigprec import NotEmulatedWarning, emulate_tf32, matmul_precision
from eigprec.audit import tf32_audit
from eigprec.tf32.gpus import profile

from .conftest import ROOT

SAMPLES_PER_OP = 1
MIN_OPERATORS = 300
MUST_SWEEP = ("linalg.eigvalsh", "linalg.svdvals", "matmul", "linalg.cholesky", "linalg.qr")


def _op_db() -> list:
    # (the package's helper: expecttest's stand-in, and torch.backends' flags left unfrozen)
    return op_db_float32("cpu")


def _same(a, b) -> bool:
    # Bit for bit, NaN equal to NaN, structure included.
    la, lb = tree_leaves(a), tree_leaves(b)
    if len(la) != len(lb):
        return False
    for x, y in zip(la, lb, strict=True):
        if isinstance(x, torch.Tensor):
            if not isinstance(y, torch.Tensor) or (x.shape, x.dtype) != (y.shape, y.dtype):
                return False
            if x.layout != torch.strided:
                x, y = x.to_dense(), y.to_dense()
            if not bool(((x == y) | (x.isnan() & y.isnan())).all()):
                return False
        elif x != y and not (x != x and y != y):
            return False
    return True


def _run(call):
    torch.manual_seed(0)
    return call()


@pytest.fixture
def no_test_case_lookup(monkeypatch):
    # op_db's sample_inputs looks for a unittest.TestCase in the caller's stack (for
    # per-sample skips, and to track the sample it hands out) with inspect.stack(), which
    # resolves the module of every frame against every loaded module: under pytest that
    # walk was most of the sweep (86 s in `make unit`; 9 s without it). No frame here is a
    # TestCase, so the walk always finds nothing; answer that at once.
    _op_db()  # (imports op_db with its stand-ins first)
    from torch.testing._internal import common_utils
    from torch.testing._internal.opinfo import core

    for module in (core, common_utils):
        monkeypatch.setattr(module, "extract_test_fn", lambda: None)


@pytest.mark.slow
def test_op_db_sweep_under_the_emulator_and_the_audit(no_test_case_lookup):
    changed = changed_ops()
    swept, skipped, problems = [], [], []
    for op in _op_db():
        if "empty" in op.name:
            skipped.append(op.full_name)
            continue
        try:
            samples = list(itertools.islice(op.sample_inputs("cpu", torch.float32), SAMPLES_PER_OP))
        except Exception:  # (op_db's own generators: skipped)
            skipped.append(op.full_name)
            continue
        warned = False
        for s in samples:

            def call(s=s, op=op):
                return op(s.input, *s.args, **s.kwargs)

            try:
                plain, again = _run(call), _run(call)
            except Exception:  # (a sample that fails plainly is not ours)
                skipped.append(op.full_name)
                break
            if not _same(plain, again):
                skipped.append(op.full_name)  # random or uninitialised output
                break
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                with matmul_precision("high"):
                    with emulate_tf32():
                        emulated = _run(call)
                    with tf32_audit():
                        audited = _run(call)
            warned |= any(issubclass(w.category, NotEmulatedWarning) for w in caught)
            if not _same(audited, plain):
                problems.append(f"{op.full_name}: the audit changed its result")
            if op.full_name not in changed:
                if not _same(emulated, plain):
                    problems.append(f"{op.full_name}: emulate_tf32 changed its result")
                if warned:
                    problems.append(f"{op.full_name}: NotEmulatedWarning where TF32 does nothing")
        else:
            swept.append(op.full_name)
            if op.full_name in SOLVES and samples and not warned:
                problems.append(f"{op.full_name}: a solve TF32 changes ran unnamed")
    assert problems == []
    assert len(swept) >= MIN_OPERATORS, (len(swept), skipped)
    for name in MUST_SWEEP:
        assert name in swept


def test_the_facts_cover_the_gpu_record():
    # book/data/ops_gpu.json (python -m eigprec_book.record ops, an H200): every op_db operator the
    # record saw change is emulated or named here, and so is every sized probe family it saw
    # change at some size; the families it left alone at every size are not listed as changed.
    import json
    from pathlib import Path

    from eigprec_book.chapters.tf32.op_sweep import PROBE_OPS, sweep_summary

    path = Path(__file__).resolve().parents[1] / "book" / "data" / "ops_gpu.json"
    summary = sweep_summary(json.loads(path.read_text()))
    assert summary["operators"] >= 300
    changed = changed_ops()
    assert set(summary["changed"]) <= changed, set(summary["changed"]) - changed
    assert set(PROBE_OPS) == {p["probe"] for p in summary["probes"]}
    for p in summary["probes"]:
        name = p["op"].split(" ")[0]
        if p["starts_at"] is not None and name in changed_ops() | {"nn.LSTM"}:
            continue
        if p["starts_at"] is not None:
            raise AssertionError(f"{p['op']} changed from size {p['starts_at']}: not listed")
        if name in ("linalg.eigvalsh", "linalg.eigh", "linalg.svdvals", "linalg.cholesky"):
            assert name not in changed, name


def test_what_the_h200_kept_in_float32_is_what_the_hopper_profile_keeps():
    kept = kept_float32(json.loads((ROOT / "book" / "data" / "ops_gpu.json").read_text()))
    hopper = profile("hopper")
    assert kept["bmm"] == kept["baddbmm"] == kept["einsum"] == {"kept": 16, "from": 64, "unit": "n"}
    assert hopper.batched_up_to == kept["bmm"]["kept"]
    for conv in ("conv1d", "conv2d"):
        assert kept[conv] == {"kept": 16, "from": 64, "unit": "channels"}
        assert hopper.conv_up_to[int(conv[4])] == kept[conv]["kept"]
    assert kept["conv_transpose2d"]["kept"] == hopper.transposed_up_to[2]
    assert kept["mm"]["kept"] is None and kept["conv3d"] == {
        "kept": None,
        "from": 4,
        "unit": "channels",
    }
