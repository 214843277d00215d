"""The audit's cheaper paths (issue 19, overhead) give what an independent computation gives.

The audit measures each product with a few fused passes (quotients written into buffers it
already holds, row/column norms kept broadcastable, mode teardown skipped when no other
mode is active); these tests pin the measured values to plain formulas and check that an
outer dispatch mode still sees only the user's own operators.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode_stack

from eigprec.audit import mode as _audit_mode
from eigprec.audit import tf32_audit
from eigprec.precision import matmul_precision
from eigprec.tf32 import has_real_tf32, round_tf32


def randn(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def expected_errors(a: torch.Tensor, b: torch.Tensor, wide: bool) -> tuple[float, float]:
    """(entry error, row·column-scaled entry error) of TF32's a @ b, from the definitions."""
    with matmul_precision("highest"):
        tf = (round_tf32(a) @ round_tf32(b)).double()
        ref = a.double() @ b.double() if wide else (a @ b).double()
    diff = (tf - ref).abs()
    floor = max(2.0**-24 * ref.abs().max().item(), torch.finfo(torch.float32).tiny)
    entry = (diff / ref.abs().clamp_min(floor)).max().item()
    tiny = torch.finfo(torch.float32).tiny
    rows = a.double().norm(dim=-1, keepdim=True).clamp_min(tiny)
    cols = b.double().norm(dim=-2, keepdim=True).clamp_min(tiny)
    return entry, (diff / rows / cols).max().item()


@settings(max_examples=40, deadline=None)
@given(
    batch=st.sampled_from([(), (3,)]),
    m=st.integers(1, 20),
    k=st.integers(1, 20),
    n=st.integers(1, 20),
    seed=st.integers(0, 2**16),
    wide=st.booleans(),
)
def test_entry_errors_match_their_definitions(batch, m, k, n, seed, wide):
    a, b = randn(*batch, m, k, seed=seed), randn(*batch, k, n, seed=seed + 1)
    with tf32_audit(float64_limit=2**20 if wide else 0) as report:
        torch.matmul(a, b)
    (r,) = report.records
    assert r.op == ("bmm" if batch else "mm")
    assert (r.fp32_norm_error is not None) == wide
    entry, scaled = expected_errors(a, b, wide)
    # float32 differences of a float32 reference are exact; only the quotients round
    assert r.entry_error == pytest.approx(entry, rel=1e-6, abs=1e-300)
    assert r.scaled_entry_error == pytest.approx(scaled, rel=1e-6, abs=1e-300)


def test_transposed_operands_take_the_other_norm_path():
    # Contiguous operands (the test above) take vector_norm for A's rows and a sum of squares
    # for B's columns (a strided axis); transposed ones swap the two paths. Either way the
    # norms must broadcast against the m×n error as row and column factors.
    a, b = randn(5, 7).T, randn(3, 5, seed=1).T
    assert a.stride(-1) != 1 and b.stride(-2) == 1
    for wide in (False, True):
        with tf32_audit(float64_limit=2**20 if wide else 0) as report:
            a @ b
        (r,) = report.records
        entry, scaled = expected_errors(a, b, wide)
        assert r.scaled_entry_error == pytest.approx(scaled, rel=1e-6)
        assert r.entry_error == pytest.approx(entry, rel=1e-6)


class Recorder(TorchDispatchMode):
    """An outer mode: records every operator that reaches it."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.seen.append(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))


def test_an_outer_mode_sees_the_users_operators_only():
    # The audit's side computations (rounding, reference, error passes) run with every mode
    # disabled when another one is active, and the records are those of an audit alone.
    a, b = randn(16, 8), randn(8, 4, seed=1)
    with tf32_audit(float64_limit=2**20) as alone:
        a @ b
    outer = Recorder()
    with outer, tf32_audit(float64_limit=2**20) as inside:
        a @ b
    assert outer.seen == ["mm"]
    assert [(r.norm_error, r.entry_error, r.scaled_entry_error) for r in inside.records] == [
        (r.norm_error, r.entry_error, r.scaled_entry_error) for r in alone.records
    ]


def test_modes_off_disables_only_when_there_is_a_mode():
    assert not _get_current_dispatch_mode_stack()
    with _audit_mode._modes_off() as disabled:
        assert disabled is None  # nothing to disable: a no-op context
    outer = Recorder()
    with outer:
        with _audit_mode._modes_off() as disabled:
            assert disabled == [outer]
            assert not _get_current_dispatch_mode_stack()
            torch.ones(2) + 1
        assert _get_current_dispatch_mode_stack() == [outer]
    assert outer.seen == []


def test_has_real_tf32_answers_a_non_cuda_device_at_once():
    assert has_real_tf32(torch.device("cpu")) is False
    assert has_real_tf32(torch.device("meta")) is False
    if not torch.cuda.is_available():
        assert has_real_tf32(torch.device("cuda")) is False  # the full path, as before


def test_skipped_modules_are_decided_once_and_alike():
    skip = ("torch", "eigprec")
    cases = {
        "torch": True,
        "torch.nn.modules.linear": True,
        "torchvision": False,  # a prefix of the name, not of a package
        "eigprec.soap": True,
        "__main__": False,
        "": False,
    }
    for _ in range(2):  # the second round is answered from the cache
        assert {m: _audit_mode._skipped(m, skip) for m in cases} == cases
    assert _audit_mode._skipped("torch.nn", ("torchvision",)) is False  # keyed by skip too


@settings(max_examples=40, deadline=None)
@given(
    m=st.integers(1, 6),
    k=st.integers(1, 6),
    n=st.integers(1, 6),
    where=st.sampled_from(["none", "a", "b"]),
    value=st.sampled_from([float("nan"), float("inf"), -float("inf"), 3e38]),
    seed=st.integers(0, 2**16),
)
def test_row_column_scale_reads_nan_free_exactly_when_no_operand_holds_nan(
    m, k, n, where, value, seed
):
    # The audit rounds a GEMM's operands to TF32 without a NaN screen of their own when the
    # row and column norms read no NaN: that reading must never call an operand with a NaN
    # NaN-free (inf and huge entries, which overflow the norms, are no NaN).
    from eigprec.audit.measures import _row_column_scale

    gen = torch.Generator().manual_seed(seed)
    a, b = torch.randn(m, k, generator=gen), torch.randn(k, n, generator=gen)
    target = {"a": a, "b": b}.get(where)
    if target is not None:
        i = int(torch.randint(target.numel(), (1,), generator=gen))
        target.view(-1)[i] = value
    _, nan_free = _row_column_scale(a, b)
    assert nan_free == (not (a.isnan().any() or b.isnan().any()))


def test_rounding_without_the_screen_equals_the_screened_rounding_on_nan_free_data():
    from eigprec.tf32.core import round_bits as _round_bits

    x = randn(64, 64) * torch.logspace(-30, 30, 64)
    x[0, :3] = torch.tensor([float("inf"), -float("inf"), 0.0])
    for rounding in ("rna", "rne"):
        fast = _round_bits(x, rounding, nan_free=True)
        assert torch.equal(fast.view(torch.int32), _round_bits(x, rounding).view(torch.int32))
