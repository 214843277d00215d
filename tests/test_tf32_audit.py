"""Tests of eigprec.audit on constructed products whose TF32 errors are known."""

from __future__ import annotations

import inspect
import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

from eigprec.audit import RANKINGS, AuditRecord, tf32_audit
from eigprec.precision import matmul_precision
from eigprec.tf32 import ROUNDINGS, emulate_tf32, matmul_3xtf32, round_tf32

CUDA_TF32 = torch.cuda.is_available() and torch.cuda.get_device_capability() >= (8, 0)


def here() -> int:
    """Line number of the caller's next line: the product under test goes there."""
    return inspect.currentframe().f_back.f_lineno + 1


def randn(*shape: int, seed: int = 0, **kw) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), **kw)


def only(report) -> AuditRecord:
    (record,) = report.records
    return record


def settings_snapshot() -> tuple:
    b = torch.backends
    return (
        b.cuda.matmul.fp32_precision,
        b.cudnn.conv.fp32_precision,
        b.mkldnn.matmul.fp32_precision,
        b.fp32_precision,
        b.cudnn.allow_tf32,
        torch.is_grad_enabled(),
        len(_get_current_dispatch_mode_stack()),
    )


# --- known errors ------------------------------------------------------------------------


def test_tf32_representable_operands_have_zero_error():
    # Small integers are exact in TF32 and their products and sums exact in float32.
    a = torch.randint(-8, 8, (16, 12), generator=torch.Generator().manual_seed(1)).float()
    b = torch.randint(-8, 8, (12, 5), generator=torch.Generator().manual_seed(2)).float()
    with tf32_audit() as report:
        a @ b
    r = only(report)
    assert (r.norm_error, r.entry_error, r.fp32_norm_error) == (0.0, 0.0, 0.0)


def test_one_rounded_operand_gives_its_rounding_error_exactly():
    a = torch.tensor([[1 + 2**-12]])  # TF32 keeps 10 bits: rounds to 1 (below half an ulp)
    with tf32_audit() as report:
        a @ torch.ones(1, 1)
    r = only(report)
    expected = 2**-12 / (1 + 2**-12)
    assert r.norm_error == expected and r.entry_error == expected
    assert r.float64_calls == 1 and r.fp32_norm_error == 0.0


def test_complete_cancellation_is_a_hundred_percent_error():
    a = torch.tensor([[1.0, 1.0], [1.0, 1.0 + 2**-12]])
    b = torch.tensor([[1.0], [-1.0]])
    with tf32_audit() as report:
        c = a @ b
    assert c.flatten().tolist() == [0.0, -(2**-12)]  # the user's float32 result
    r = only(report)
    assert r.norm_error == 1.0 and r.entry_error == 1.0


def test_entry_error_is_floored_at_float32_resolution_of_the_result():
    # Row 2 of C is 2**-42, lost completely by TF32, but 2**-18 below float32's resolution
    # at the scale of row 1: it is measured against 2**-24 * max|C|, not its own size.
    a = torch.tensor([[1.0, 0.0], [2.0**-30, 2.0**-30]])
    b = torch.tensor([[1 + 2**-12], [-1.0]])
    with tf32_audit() as report:
        a @ b
    first_row = 2**-12 / (1 + 2**-12)
    assert only(report).entry_error == pytest.approx(first_row, rel=1e-12)
    with tf32_audit() as report:
        a[1:] @ b  # alone, the small row is its own scale: 100 % lost
    assert only(report).entry_error == 1.0


def test_cancellation_ranks_first():
    benign_a, benign_b = randn(64, 64, seed=3), randn(64, 64, seed=4)
    x = randn(64, 32, seed=5)
    # (x, x + tiny) @ (y; -y) = tiny-scaled result from operands of size 1: cancellation.
    near = torch.cat([x, x + 1e-3 * randn(64, 32, seed=6)], dim=1)
    y = randn(32, 16, seed=7)
    signs = torch.cat([y, -y], dim=0)
    with tf32_audit() as report:
        line_benign = here()
        benign_a @ benign_b
        line_cancel = here()
        near @ signs
    first, second = report.records
    assert first.frames[0][1] == line_cancel and second.frames[0][1] == line_benign
    assert first.norm_error > 0.05 > 1e-3 > second.norm_error
    assert report.ranked("entry")[0].frames[0][1] == line_cancel


@settings(max_examples=40, deadline=None)
@given(
    m=st.integers(1, 24),
    k=st.integers(1, 24),
    n=st.integers(1, 24),
    scale=st.sampled_from([1e-20, 1e-3, 1.0, 1e5, 1e18]),
    seed=st.integers(0, 2**16),
    rounding=st.sampled_from(ROUNDINGS),
)
def test_norm_error_matches_an_independent_computation(m, k, n, scale, seed, rounding):
    a, b = scale * randn(m, k, seed=seed), randn(k, n, seed=seed + 1)
    with tf32_audit(rounding=rounding) as report:
        a @ b
    r = only(report)
    ref = a.double() @ b.double()
    with matmul_precision("highest"):
        tf = round_tf32(a, rounding) @ round_tf32(b, rounding)
    expected = ((tf.double() - ref).norm() / ref.norm()).item()
    assert r.norm_error == pytest.approx(expected, rel=1e-6, abs=1e-300)
    # Each product of TF32 operands is exact; the rounding errors are at most 2**-10 each
    # (rz) relative, so the norm-wise error is bounded by the |A||B| condition number.
    cond = ((a.abs().double() @ b.abs().double()).norm() / ref.norm()).item()
    assert r.norm_error <= 2 * 2**-10 * cond * (1 + 1e-3)


# --- what is audited ---------------------------------------------------------------------


def test_call_sites_and_counts():
    a, b = randn(8, 8), randn(8, 8, seed=1)
    with tf32_audit() as report:
        line_loop = here()
        for _ in range(5):
            a @ b
        line_once = here()
        torch.mm(a, b)
    by_line = {r.frames[0][1]: r for r in report.records}
    assert by_line[line_loop + 1].calls == 5 and by_line[line_once].calls == 1
    record = by_line[line_loop + 1]
    assert record.frames[0][0] == __file__ and record.frames[0][2] == "test_call_sites_and_counts"
    assert record.site == f"test_tf32_audit.py:{line_loop + 1}"
    assert record.op == "mm" and record.shapes == ((8, 8), (8, 8)) and record.phase == "forward"


def test_shapes_split_a_site_and_matmul_family_is_covered():
    x, w, bias = randn(4, 6), randn(5, 6, seed=1), randn(5, seed=2)
    batch = randn(3, 4, 6, seed=3)
    with tf32_audit() as report:
        for size in (2, 3):
            randn(size, 6) @ w.T
        F.linear(x, w, bias)
        torch.einsum("bij,kj->bik", batch, w)
        batch @ randn(3, 6, 2, seed=4)
        torch.baddbmm(randn(3, 4, 2), batch, randn(3, 6, 2, seed=5))
        torch.addmm(bias, x, w.T)
    ops = sorted((r.op, r.shapes) for r in report.records)
    assert ("mm", ((2, 6), (6, 5))) in ops and ("mm", ((3, 6), (6, 5))) in ops
    assert [op for op, _ in ops].count("addmm") == 2
    assert {op for op, _ in ops} == {"mm", "addmm", "bmm", "baddbmm"}
    assert all(r.norm_error > 0 for r in report.records)  # random operands are not TF32


def test_matrix_vector_products_are_not_audited():
    a, v = randn(16, 16), randn(16, seed=1)
    with tf32_audit() as report:
        a @ v
        torch.mv(a, v)
        torch.addmv(v, a, v)
        v @ v
        torch.dot(v, v)
    assert len(report) == 0
    assert "No float32" in report.to_markdown() and "No float32" in str(report)


def test_other_dtypes_are_not_audited():
    a = randn(8, 8)
    with tf32_audit() as report:
        a.double() @ a.double()
        a.bfloat16() @ a.bfloat16()
    assert len(report) == 0


def test_convolutions_forward_and_backward():
    conv = torch.nn.Conv2d(3, 4, 3)
    with torch.no_grad():
        conv.weight.copy_(randn(4, 3, 3, 3))
    image = randn(2, 3, 8, 8, seed=1, requires_grad=True)
    with tf32_audit() as report:
        line = here()
        out = conv(image)
        out.square().sum().backward()
    ops = {r.op: r for r in report.records}
    assert set(ops) == {
        "convolution",
        "convolution_backward[input]",
        "convolution_backward[weight]",
    }
    assert all(r.frames[0][1] == line for r in ops.values())
    assert ops["convolution_backward[weight]"].phase == "backward (ConvolutionBackward0)"
    assert all(0 < r.norm_error < 2e-3 for r in ops.values())


def test_conv1d_and_transposed_convolution():
    x = randn(2, 3, 10)
    with tf32_audit() as report:
        F.conv1d(x, randn(4, 3, 3, seed=1))
        F.conv_transpose1d(x, randn(3, 2, 3, seed=2))
    assert [r.op for r in report.records] == ["convolution", "convolution"]


def test_backward_products_are_attributed_to_their_forward_line():
    x = randn(32, 16)
    w1 = randn(16, 24, seed=1, requires_grad=True)
    w2 = randn(24, 8, seed=2, requires_grad=True)
    with tf32_audit() as report:
        line_1 = here()
        h = (x @ w1).tanh()
        line_2 = here()
        y = h @ w2
        y.square().sum().backward()
    backward = [r for r in report.records if r.phase != "forward"]
    # grad of w1 (xᵀ·g), of h (g·w2ᵀ) and of w2 (hᵀ·g); x needs no gradient.
    assert sorted((r.frames[0][1], r.shapes) for r in backward) == sorted(
        [
            (line_1, ((16, 32), (32, 24))),
            (line_2, ((32, 8), (8, 24))),
            (line_2, ((24, 32), (32, 8))),
        ]
    )
    assert all(r.phase == "backward (MmBackward0)" for r in backward)


def test_backward_of_a_graph_built_outside_is_attributed_to_the_backward_line():
    w = randn(16, 16, requires_grad=True)
    loss = (randn(8, 16, seed=1) @ w).square().sum()
    with tf32_audit() as report:
        line = here()
        loss.backward()
    (record,) = report.records
    assert record.frames[0][1] == line and record.phase == "backward (MmBackward0)"


@pytest.mark.parametrize("context", [torch.no_grad, torch.inference_mode, torch.enable_grad])
def test_grad_modes(context):
    # Under inference_mode composite operators reach the audit whole; it decomposes them.
    a, b, w = randn(8, 8), randn(8, 8, seed=1), randn(2, 1, 3, 3, seed=2)

    def work():
        with context():
            return [a @ b, F.linear(a, b, a[0]), torch.einsum("ij,jk", a, b), F.conv2d(a[None], w)]

    plain = work()
    with tf32_audit() as report:
        audited = work()
    assert all(torch.equal(p, q) for p, q in zip(plain, audited, strict=True))
    assert sorted(r.op for r in report.records) == ["addmm", "bmm", "convolution", "mm"]


def test_depth_two_separates_the_callers_of_a_helper():
    def helper(x, y):
        return x @ y

    a = randn(4, 4)
    with tf32_audit(depth=2) as report:
        line_1 = here()
        helper(a, a)
        line_2 = here()
        helper(a, a)
    callers = sorted(r.frames[1][1] for r in report.records)
    assert callers == [line_1, line_2]
    assert all(r.frames[0][2] == "helper" for r in report.records)
    assert "←" in report.to_markdown()


def test_skip_decides_whose_lines_count():
    a = randn(8, 8)
    with tf32_audit() as report:
        line = here()
        matmul_3xtf32(a, a)
    assert {r.frames[0][1] for r in report.records} == {line}
    with tf32_audit(skip=("torch",)) as report:
        matmul_3xtf32(a, a)
    assert {r.site.split(":")[0] for r in report.records} == {"compensated.py"}
    # The three products of TF32 pieces: TF32 adds nothing to float32's own error.
    assert all(r.norm_error == r.fp32_norm_error > 0 for r in report.records)


def test_only_enabled_follows_the_settings():
    a = randn(8, 8)
    with tf32_audit(only_enabled=True) as report:
        with matmul_precision("highest"):
            a @ a
        with matmul_precision("high"):
            line = here()
            a @ a
    record = only(report)
    assert record.frames[0][1] == line and record.tf32_calls == record.calls == 1
    with tf32_audit() as report:
        with matmul_precision("highest"):
            a @ a
    assert only(report).tf32_calls == 0


def test_float64_limit_chooses_the_reference():
    a = randn(16, 16)
    with tf32_audit(float64_limit=16**3) as report:
        a @ a
    assert only(report).float64_calls == 1 and only(report).fp32_norm_error > 0
    with tf32_audit(float64_limit=16**3 - 1) as report:
        a @ a
    assert only(report).float64_calls == 0 and only(report).fp32_norm_error is None


def test_non_finite_entries_are_left_out():
    a = randn(4, 4)
    a[0, 0] = math.inf
    with tf32_audit() as report:
        c = a @ randn(4, 4, seed=1).abs()
    assert torch.isinf(c[0]).all()
    r = only(report)
    assert 0 < r.norm_error < 2e-3 and math.isfinite(r.entry_error)


def test_zero_product_has_zero_error():
    with tf32_audit() as report:
        torch.zeros(3, 4) @ randn(4, 2)
    r = only(report)
    assert (r.norm_error, r.entry_error) == (0.0, 0.0)


# --- the user's code runs as without the audit -------------------------------------------


def train_step(mlp: torch.nn.Module, x: torch.Tensor) -> list[torch.Tensor]:
    mlp.zero_grad()
    out = mlp(x)
    F.cross_entropy(out, torch.arange(len(x)) % 3).backward()
    return [out.detach().clone()] + [p.grad.clone() for p in mlp.parameters()]


def test_results_are_bit_identical():
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(
        torch.nn.Conv1d(2, 4, 3), torch.nn.Flatten(), torch.nn.GELU(), torch.nn.Linear(24, 3)
    )
    x = randn(16, 2, 8)
    plain = train_step(mlp, x)
    with tf32_audit() as report:
        audited = train_step(mlp, x)
    assert len(report) >= 5
    assert all(torch.equal(p, q) for p, q in zip(plain, audited, strict=True))


def test_in_place_and_out_forms_are_measured_and_unchanged():
    bias, a, b = randn(4, 4), randn(4, 5, seed=1), randn(5, 4, seed=2)
    expected = torch.addmm(bias, a, b)
    target, out = bias.clone(), torch.empty(4, 4)
    with tf32_audit() as report:
        target.addmm_(a, b)
        torch.addmm(bias, a, b, out=out)
        torch.mm(a, b, out=torch.empty(4, 4))
    assert torch.equal(target, expected) and torch.equal(out, expected)
    assert sorted(r.op for r in report.records) == ["addmm", "addmm_", "mm"]
    errors = {r.op: r.norm_error for r in report.records}
    assert errors["addmm_"] == errors["addmm"] > 0  # measured on the inputs before the update


def test_settings_and_mode_stack_are_restored_even_after_an_error():
    before = settings_snapshot()
    with pytest.raises(RuntimeError, match="boom"), tf32_audit():
        randn(4, 4) @ randn(4, 4)
        raise RuntimeError("boom")
    assert settings_snapshot() == before


def test_inside_an_emulator_the_audit_measures_against_clean_float32():
    a, b = randn(32, 32), randn(32, 32, seed=1)
    with tf32_audit() as plain:
        a @ b
    with matmul_precision("high"), emulate_tf32():
        emulated = a @ b
        with tf32_audit() as inner:
            c = a @ b
    assert torch.equal(c, emulated)  # the emulator still decides the user's result
    assert only(inner).norm_error == only(plain).norm_error > 0


def test_hardware_path_flips_one_setting_and_restores_it(monkeypatch):
    # The CPU stands in for a TF32 GPU: the op is re-run under the other TF32 setting (the
    # CPU ignores it, so TF32 adds nothing to float32's own error), and the setting is back.
    import contextlib

    import eigprec.audit.mode as mode

    flips = []
    original = mode._gpu_tf32

    @contextlib.contextmanager
    def recording(kind, on, *rest):
        with original(kind, on, *rest):
            matmul, conv = torch.backends.cuda.matmul, torch.backends.cudnn.conv
            flips.append((kind, on, matmul.fp32_precision, conv.fp32_precision))
            yield

    monkeypatch.setattr(mode, "has_real_tf32", lambda device: True)
    monkeypatch.setattr(mode, "_gpu_tf32", recording)
    a = randn(8, 8)
    before = settings_snapshot()
    with tf32_audit() as report:
        with matmul_precision("highest"):
            a @ a
        with matmul_precision("high"):
            a @ a
        F.conv1d(a[None], randn(2, 8, 3, seed=1))
    assert settings_snapshot() == before
    assert flips == [
        ("matmul", True, "tf32", before[1]),  # at 'highest': re-run in TF32
        ("matmul", False, "ieee", before[1]),  # at 'high': re-run at full float32
        ("conv", False, before[0], "ieee"),  # cuDNN's TF32 is on by default
    ]
    assert sum(r.tf32_calls for r in report.records) == 2
    assert all(r.norm_error == r.fp32_norm_error for r in report.records)


@pytest.mark.skipif(not CUDA_TF32, reason="needs an NVIDIA GPU with TF32")
def test_gpu_uses_the_hardware():
    a, b = randn(256, 256).cuda(), randn(256, 256, seed=1).cuda()
    before = settings_snapshot()
    with tf32_audit() as report:
        a @ b
        with matmul_precision("high"):
            a @ b
    assert settings_snapshot() == before
    records = report.records
    assert [r.calls for r in records] == [1, 1]
    assert all(1e-5 < r.norm_error < 2e-3 for r in records)


# --- the report ----------------------------------------------------------------------------


def test_tables():
    a = randn(8, 8)
    with tf32_audit() as report:
        a @ a
        torch.bmm(a[None], a[None])
    md = report.to_markdown().splitlines()
    assert len(md) == 4 and md[1].startswith("|---")
    assert "test_tf32_audit.py:" in md[2] and "8x8 × 8x8" in report.to_markdown()
    assert len(report.to_markdown(limit=1).splitlines()) == 3
    text = str(report).splitlines()
    assert text[0].startswith("site") and len(text) == 3
    assert report.rows(by="entry")[0]["op"] in ("mm", "bmm")
    assert repr(report) == "AuditReport(2 records)"


def test_ranking_order():
    a = torch.tensor([[1.0, 1.0], [1.0, 1.0 + 2**-12]])
    b = torch.tensor([[1.0], [-1.0]])
    with tf32_audit() as report:
        randn(8, 8) @ randn(8, 8, seed=1)
        a @ b
    assert [r.norm_error for r in report.records] == sorted(
        (r.norm_error for r in report.records), reverse=True
    )
    assert report.records[0].shapes == ((2, 2), (2, 1))


# --- bad arguments ---------------------------------------------------------------------


@settings(max_examples=30, deadline=None)
@given(st.text(max_size=5).filter(lambda s: s not in ROUNDINGS))
def test_bad_rounding(rounding):
    with pytest.raises(ValueError, match="rounding"), tf32_audit(rounding=rounding):
        pass


@settings(max_examples=30, deadline=None)
@given(st.integers(max_value=-1))
def test_negative_float64_limit(limit):
    with pytest.raises(ValueError, match="float64_limit"), tf32_audit(float64_limit=limit):
        pass


@settings(max_examples=30, deadline=None)
@given(st.integers(max_value=0))
def test_depth_below_one(depth):
    with pytest.raises(ValueError, match="depth"), tf32_audit(depth=depth):
        pass


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"rounding": 1}, ValueError, "rounding"),
        ({"float64_limit": 1.5}, TypeError, "float64_limit"),
        ({"float64_limit": True}, TypeError, "float64_limit"),
        ({"only_enabled": 1}, TypeError, "only_enabled"),
        ({"skip": "torch"}, TypeError, "skip"),
        ({"skip": ("torch", "")}, TypeError, "skip"),
        ({"depth": 2.0}, TypeError, "depth"),
    ],
)
def test_bad_arguments(kwargs, error, message):
    before = settings_snapshot()
    with pytest.raises(error, match=message), tf32_audit(**kwargs):
        pass
    assert settings_snapshot() == before


def test_bad_report_arguments():
    with tf32_audit() as report:
        randn(2, 2) @ randn(2, 2)
    with pytest.raises(ValueError, match="by must be one of"):
        report.ranked("harm")
    with pytest.raises(ValueError, match="limit"):
        report.to_markdown(limit=-1)
    assert set(RANKINGS) == {"norm", "entry"}


def test_docstring_examples():
    import doctest

    import eigprec.audit.attribution
    import eigprec.audit.report

    for module in (eigprec.audit.report, eigprec.audit.attribution):
        result = doctest.testmod(module)
        assert result.attempted > 0 and result.failed == 0


# --- issue 21 item 1: an audit opened inside the emulator ---------------------------------


@pytest.mark.parametrize("float64_limit", [0, 2**18, 2**25])
def test_audit_inside_emulator_reports_tf32_and_float32_errors(float64_limit):
    # The emulator rounds the user's product; the audit's float32 result must come from a
    # clean run, not from the (emulated) user's one, or the TF32 error reads 0.
    a, b = randn(256, 256, seed=1), randn(256, 256, seed=2)
    with tf32_audit(float64_limit=float64_limit) as outside:
        a @ b
    with (
        matmul_precision("high"),
        emulate_tf32(),
        tf32_audit(float64_limit=float64_limit) as inside,
    ):
        a @ b
    want, got = only(outside), only(inside)
    assert 1e-4 < want.norm_error < 1e-3
    assert got.norm_error == pytest.approx(want.norm_error, rel=1e-6)
    assert got.entry_error == pytest.approx(want.entry_error, rel=1e-6)
    if float64_limit >= 256**3:
        assert got.fp32_norm_error == pytest.approx(want.fp32_norm_error, rel=1e-6)
        assert got.fp32_norm_error < 1e-5
    else:
        assert got.fp32_norm_error is None


# --- issue 21 item 8 / issue 19 item 4: TF32 overflow is flagged, never error 0 ----------


@pytest.mark.parametrize("float64_limit", [0, 2**18])
def test_tf32_overflow_to_inf_is_flagged(float64_limit):
    fmax = torch.finfo(torch.float32).max  # rounds up to 2**128 = inf in TF32
    a = torch.tensor([[fmax, 1.0], [1.0, 1.0]])
    b = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    with tf32_audit(float64_limit=float64_limit) as report:
        c = a @ b
    assert torch.isfinite(c).all()  # the user's float32 result is finite
    r = only(report)
    assert r.tf32_nonfinite == 1
    assert r.norm_error == math.inf and r.entry_error == math.inf
    row = report.rows()[0]
    assert row["TF32 inf/NaN calls"] == "1" and row["TF32 err. (norm)"] == "inf"


def test_no_overflow_column_without_overflow():
    with tf32_audit() as report:
        randn(4, 4) @ randn(4, 4, seed=1)
    assert only(report).tf32_nonfinite == 0
    assert "TF32 inf/NaN calls" not in report.rows()[0]


# --- issue 21 item 12: auditing a training loop does not grow memory ---------------------


def test_forward_frames_stay_bounded_over_a_long_training_loop(monkeypatch):
    # The bound is lowered so that a loop 20x longer than it runs in a few seconds (with the
    # real bound, 4096, 20,000 steps take ~45 s here and also stay at the bound).
    from eigprec.audit import mode as _audit_mode

    monkeypatch.setattr(_audit_mode, "FORWARD_FRAMES_LIMIT", 100)
    w = randn(4, 3, requires_grad=True)
    x = randn(2, 4, seed=1)
    with tf32_audit() as report:
        for _ in range(2_000):
            (x @ w).sum().backward()
    assert len(report._settings.forward_frames) == 100
    assert len(report) == 2 and {r.calls for r in report.records} == {2_000}
    # attribution still works: the backward product is at the forward line
    assert len({r.site for r in report.records}) == 1


# --- issue 19 item 4: layers inside one nn.Module call are told apart --------------------


def test_layers_inside_one_module_call_get_their_module_paths():
    torch.manual_seed(0)  # torch.nn initialises from the global generator
    layer = torch.nn.TransformerEncoderLayer(8, 2, 16, batch_first=True)
    encoder = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
    x = randn(2, 5, 8)
    with tf32_audit() as report:
        encoder(x).sum().backward()  # one line of user code
    assert len({r.site for r in report.records}) == 1
    modules = {r.module for r in report.records}
    assert {"layers.0.linear1", "layers.1.linear2", "layers.0.self_attn"} <= modules
    assert any(
        r.module == "layers.1.linear1" and r.phase.startswith("backward") for r in report.records
    )
    assert "[layers.0.linear1]" in str(report)


def test_products_outside_modules_have_no_module_path():
    with tf32_audit() as report:
        randn(3, 3) @ randn(3, 3, seed=1)
    assert only(report).module == ""


def test_scaled_entry_error_does_not_alarm_on_entries_near_zero():
    # One output entry is near zero by cancellation: its relative (entry) error is huge,
    # its error against its row and column scale is TF32-sized.
    a = randn(8, 64)
    b = randn(64, 8, seed=1)
    b[:, 0] -= a[0] * (a[0] @ b[:, 0]) / (a[0] @ a[0])  # (a @ b)[0, 0] ≈ 0
    with tf32_audit(float64_limit=2**20) as report:
        a @ b
    r = only(report)
    assert r.entry_error > 1e-2
    assert 1e-5 < r.scaled_entry_error < 2.0**-10


@pytest.mark.parametrize("limit", [True, "1", 1.0])
def test_rows_limit_of_the_wrong_type_is_a_type_error(limit):
    # Issue 21 item 14: rows(limit=True) was accepted and rows(limit="1") raised ValueError.
    a = torch.randn(8, 8)
    with tf32_audit() as report:
        a @ a
    with pytest.raises(TypeError, match="limit"):
        report.rows(limit=limit)
    with pytest.raises(ValueError, match="limit"):
        report.rows(limit=-1)


# --- issue 19 item 4: the row·col-scaled entry error is shown, not only stored ----------


def test_rows_show_the_entry_error_at_the_row_and_column_scale():
    # C = A B with entries near zero by cancellation: the worst entry against its own size
    # alarms; against ‖A_i,:‖‖B_:,j‖ it reads TF32's ordinary 2**-12 or so
    a = torch.tensor([[1.0, 1.0], [1.0, 1.0 + 2**-12]])
    b = torch.tensor([[1.0, 1.0], [-1.0, 1.0]])
    with tf32_audit() as report:
        a @ b
    row = report.rows()[0]
    r = only(report)
    assert row["TF32 err. (row·col)"] == f"{r.scaled_entry_error:.1e}"
    assert r.entry_error > 1000 * r.scaled_entry_error and r.scaled_entry_error < 2**-11
    conv_in = randn(1, 1, 5, 5)
    with tf32_audit() as report:
        torch.nn.functional.conv2d(conv_in, randn(1, 1, 3, 3, seed=1))
    assert report.rows()[0]["TF32 err. (row·col)"] == "–"  # not defined for convolutions
