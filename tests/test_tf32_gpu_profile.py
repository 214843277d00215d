"""emulate_tf32(gpu=...) and tf32_audit(gpu=...): a named GPU's tie rule is the default
rounding, and "hopper" keeps in float32 what the book's H200 operator sweep saw stay float32
(issue 52, item 1); without a GPU named every product the switches allow is rounded."""

from __future__ import annotations

import json

import pytest
import torch
from eigprec_book.record import ops as rec_ops

from eigprec import emulate_tf32, matmul_precision, tf32_audit
from eigprec.tf32 import gpus

from .conftest import ROOT

RECORD = json.loads((ROOT / "book" / "data" / "ops_gpu.json").read_text())
TIE = 1 + 2**-11


def _changed(call, **emulate) -> bool:
    with matmul_precision("highest"):
        plain = call()
    with matmul_precision("high"), emulate_tf32(**emulate):
        emulated = call()
    return not all(
        torch.equal(a, b) for a, b in zip(_leaves(plain), _leaves(emulated), strict=True)
    )


def _leaves(out):
    return [t for t in torch.utils._pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]


# The sized probes whose family the profile rules on, at the sizes the CPU runs in seconds.
_PROBES = ("mm", "vecmat", "bmm", "baddbmm", "einsum", "linear", "conv1d", "conv2d", "conv3d")
_PROBES += ("conv_transpose2d",)


@pytest.mark.parametrize("name", _PROBES)
def test_hopper_reproduces_the_h200_probes(name):
    (row,) = [p for p in RECORD["probes"] if p["probe"] == name]
    judged = 0
    for size, measured in row["sizes"].items():
        n = int(size)
        if n > 256 or not all(measured["repeatable"].values()):
            continue  # (1024 costs minutes here; a probe that did not repeat is not judged)
        call = rec_ops._probe(name, n, "cpu", torch.float32)
        gpu_changed = bool(measured["changed"])
        assert _changed(call, gpu="hopper") == gpu_changed, (name, n)
        judged += 1
    assert judged >= 2


def test_without_a_gpu_named_the_small_products_are_rounded_an_upper_bound():
    for name in ("bmm", "conv2d"):
        call = rec_ops._probe(name, 16, "cpu", torch.float32)
        assert _changed(call)  # the H200 left these unchanged


def test_hopper_reproduces_the_op_db_samples_of_the_record():
    # op_db's small samples, shapes as recorded: the product families the profile rules on.
    rows = {r["op"]: r for r in RECORD["operators"]}
    g = torch.Generator().manual_seed(0)

    def r(shape):
        return torch.randn(*shape, generator=g)

    F = torch.nn.functional
    calls = {
        "bmm": lambda a, b: torch.bmm(a, b),
        "baddbmm": lambda s, a, b: torch.baddbmm(s, a, b),
        "addbmm": lambda s, a, b: torch.addbmm(s, a, b),
        "mm": lambda a, b: a @ b,
        "addmm": lambda s, a, b: torch.addmm(s, a, b),
        "linalg.multi_dot": lambda a, b: torch.linalg.multi_dot([a, b]),
        "nn.functional.conv1d": lambda x, w, b: F.conv1d(x, w, b),
        "nn.functional.conv2d": lambda x, w, b: F.conv2d(x, w, b),
        "nn.functional.conv_transpose2d": lambda x, w, b: F.conv_transpose2d(x, w, b),
    }
    for op, call in calls.items():
        args = [r(s) for s in rows[op]["shapes"]]
        assert _changed(lambda c=call, a=args: c(*a), gpu="hopper") == bool(rows[op]["changed"])


def test_a_named_gpu_sets_the_default_rounding_and_an_explicit_one_wins(monkeypatch):
    a, b = torch.tensor([[TIE], [TIE]]), torch.ones(1, 1)  # two rows: one row stays float32
    monkeypatch.setenv("EIGPREC_TF32_ROUNDING", "rna")
    for kwargs, expected in [
        ({"gpu": "hopper"}, 1.0),  # ties to even, whatever the process default says
        ({"gpu": "ampere"}, 1 + 2**-10),
        ({"gpu": "hopper", "rounding": "rna"}, 1 + 2**-10),
        ({}, 1 + 2**-10),
    ]:
        with matmul_precision("high"), emulate_tf32(**kwargs):
            assert (a @ b)[0, 0].item() == expected, kwargs
    monkeypatch.setenv("EIGPREC_TF32_ROUNDING", "rne")
    with matmul_precision("high"), emulate_tf32(gpu="ampere"):
        assert (a @ b)[0, 0].item() == 1 + 2**-10


@pytest.mark.parametrize("bad", ["h100", "Hopper", 3, True])
def test_an_unknown_gpu_is_refused_where_it_is_written(bad):
    with pytest.raises(ValueError, match="gpu must be None or one of"):
        emulate_tf32(gpu=bad)
    with pytest.raises(ValueError, match="gpu must be None or one of"):
        tf32_audit(gpu=bad)


def test_the_audit_leaves_out_what_the_named_gpu_keeps_in_float32():
    small, large = torch.ones(8, 16, 16), torch.ones(8, 64, 64)
    with tf32_audit(gpu="hopper") as report:
        torch.bmm(small, small)
        torch.bmm(large, large)
    assert [r.shapes for r in report.records] == [((8, 64, 64), (8, 64, 64))]
    with tf32_audit() as report:
        torch.bmm(small, small)
    assert len(report.records) == 1


def test_the_profile_reads_what_the_record_says():
    hopper = gpus.profile("hopper")
    probes = {p["probe"]: p for p in RECORD["probes"]}

    def largest_unchanged(name):
        sizes = probes[name]["sizes"]
        kept = [
            int(n)
            for n, m in sizes.items()
            if m.get("changed") == [] and all(m["repeatable"].values())
        ]
        changed = [int(n) for n, m in sizes.items() if m.get("changed")]
        assert not changed or max(kept) < min(changed)
        return max(kept)

    assert hopper.batched_up_to == largest_unchanged("bmm") == largest_unchanged("baddbmm")
    channels = {n: max(n // 4, 4) for n in (16, 64, 256, 1024)}  # the recorder's channels
    assert hopper.conv_up_to[1] == channels[largest_unchanged("conv1d")]
    assert hopper.conv_up_to[2] == channels[largest_unchanged("conv2d")]
    assert hopper.transposed_up_to[2] == channels[largest_unchanged("conv_transpose2d")]
    assert 3 not in hopper.conv_up_to and probes["conv3d"]["starts_at"]["cudnn"] == 16
    assert probes["vecmat"]["starts_at"] == {"matmul": None, "cudnn": None} and hopper.one_row
    h100 = json.loads((ROOT / "book" / "data" / "tf32_gpu.json").read_text())
    assert h100["rounding"]["matches"]["first_operand"] == [hopper.rounding]


def test_the_api_page_states_the_limits_the_profile_keeps():
    # The API page's coverage list and decided behaviour state the H200's small-size limits
    # in prose (not executed): they must be the profile's, which is the record's.
    text = (ROOT / "book" / "api.md").read_text()
    hopper = gpus.profile("hopper")
    n, c = hopper.batched_up_to, hopper.conv_up_to[2]
    assert f"up to\n  {n} × {n} × {n}" in text or f"up to {n} × {n} × {n}" in text
    assert f"up to {c} channels" in text and f"at 8 × {n} × {n}" in text
    assert 'gpu="hopper"' in text and "upper bound" in text
