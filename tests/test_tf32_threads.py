"""The audit's and the emulator's process-wide switches under threads (issue 35, items 1-3).

A TF32 GPU is stood in for by patching ``has_real_tf32``: the audit's hardware branch then
flips cuBLAS's (or cuDNN's) TF32 switch around its side product on the CPU, which ignores it,
so what is tested is the protocol around the flip, not numbers. Races are made deterministic
with events: a side product (or an operand) that waits for another thread to act.
"""

from __future__ import annotations

import contextlib
import threading

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import eigprec.audit.mode as audit_mode
from eigprec import current_matmul_precision, matmul_precision
from eigprec.audit import tf32_audit
from eigprec.tf32 import tf32_matmul_enabled

from ._precision_state import raw_precision_state

pytestmark = pytest.mark.skipif(
    not hasattr(torch.backends.cuda.matmul, "fp32_precision"),
    reason="fp32_precision settings exist from torch 2.9",
)

_aten = torch.ops.aten


def _run(*targets):
    errors: list[BaseException] = []

    def guard(target):
        def run():
            try:
                target()
            except BaseException as e:  # re-raised in the test's thread
                errors.append(e)

        return run

    threads = [threading.Thread(target=guard(t)) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    if errors:
        raise errors[0]


class _WaitingMM:
    """Stands in for ``aten.mm`` in the audit's side product: it signals, then waits."""

    def __init__(self, started: threading.Event, go_on: threading.Event) -> None:
        self.started, self.go_on = started, go_on
        self.settings_seen: list[str] = []

    def default(self, *args, **kwargs):
        self.settings_seen.append(torch.backends.cuda.matmul.fp32_precision)
        self.started.set()
        self.go_on.wait(0.5)  # returns at once before the fix; times out after it
        return _aten.mm.default(*args, **kwargs)


@pytest.mark.parametrize("start", ["none", "ieee", "tf32"])
def test_gpu_branch_keeps_out_of_another_threads_precision_block(monkeypatch, start):
    # Thread B sits in `with matmul_precision("highest")` while thread A's audited product
    # flips cuBLAS's switch for its side product. Before the fix A flipped without the lock:
    # B read 'high' inside its 'highest' block, and the switch ended as 'ieee' where it
    # started as 'none'.
    torch.backends.cuda.matmul.fp32_precision = start
    before = raw_precision_state()
    b_inside, a_flipped = threading.Event(), threading.Event()
    side = _WaitingMM(a_flipped, threading.Event())
    monkeypatch.setattr(audit_mode, "has_real_tf32", lambda device: True)
    monkeypatch.setitem(audit_mode._FUNCTIONAL, _aten.mm, side)
    seen: list[tuple[str, bool]] = []
    a = torch.randn(16, 16)

    def audited():
        b_inside.wait(5)
        with tf32_audit():
            a @ a

    def other():
        with matmul_precision("highest"):
            b_inside.set()
            a_flipped.wait(0.5)  # before the fix A flips now; after it, A waits for us
            seen.append((current_matmul_precision(), tf32_matmul_enabled()))

    try:
        _run(audited, other)
        assert seen == [("highest", False)]
        assert side.settings_seen  # the hardware branch ran
        assert raw_precision_state() == before
    finally:
        torch.backends.cuda.matmul.fp32_precision = "none"


def test_gpu_branch_restores_none_exactly(monkeypatch):
    # 'none' (inherit) is restored as 'none', not as the value it inherited.
    monkeypatch.setattr(audit_mode, "has_real_tf32", lambda device: True)
    before = raw_precision_state()
    assert before["cuda"] == "none"
    a = torch.randn(8, 8)
    with tf32_audit():
        a @ a
        torch.nn.functional.conv1d(a[None], torch.randn(2, 8, 3))
    assert raw_precision_state() == before
    assert torch.backends.cuda.matmul.fp32_precision == "none"


def test_gpu_branch_with_many_threads_ends_where_it_started(monkeypatch):
    # The race of the finding, free-running: audited products in one thread, 'highest'
    # blocks in another that must never see TF32 on.
    import sys

    monkeypatch.setattr(audit_mode, "has_real_tf32", lambda device: True)
    before = raw_precision_state()
    wrong: list[str] = []
    a = torch.randn(8, 8)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)

    def audited():
        with tf32_audit():
            for _ in range(300):
                a @ a

    def other():
        for _ in range(300):
            with matmul_precision("highest"):
                if tf32_matmul_enabled():
                    wrong.append(torch.backends.cuda.matmul.fp32_precision)

    try:
        _run(audited, other)
    finally:
        sys.setswitchinterval(interval)
    assert wrong == []
    assert raw_precision_state() == before


def test_autograd_worker_acts_for_the_audits_owner():
    # On a GPU autograd runs backward products in its own thread while the thread that
    # called backward() waits, perhaps inside a matmul_precision block: an exclusive hold
    # taken on the owner's behalf must not wait for the owner (it would wait forever).
    from eigprec import _context, precision

    done = threading.Event()
    with matmul_precision("high"):
        me = _context.owner()

        def worker():
            with precision._exclusive(me):
                done.set()

        t = threading.Thread(target=worker)
        t.start()
        t.join(10)
    assert done.is_set()


# --- item 2: the emulated LSTM and oneDNN's process-wide switch ---------------------------


def test_emulated_lstm_leaves_onednn_alone_under_a_concurrent_flags_block(monkeypatch):
    # Thread A runs an emulated nn.LSTM; while it runs, thread B enters and leaves
    # torch.backends.mkldnn.flags(enabled=False) around A's end. Before the fix A switched
    # oneDNN off process-wide around the LSTM: B saved A's 'off' as its starting value and
    # restored it, so oneDNN stayed off after both threads ended.
    import eigprec.tf32 as tf32

    assert torch._C._get_mkldnn_enabled()
    a_inside, b_entered, a_done = threading.Event(), threading.Event(), threading.Event()
    seen_in_a: list[bool] = []
    import eigprec.tf32.core as core

    original = core.round_bits

    def rounding(x, rounding, screen=True):
        if not a_inside.is_set():
            seen_in_a.append(torch._C._get_mkldnn_enabled())
            a_inside.set()
            b_entered.wait(0.5)
        return original(x, rounding, screen)

    monkeypatch.setattr(core, "round_bits", rounding)
    lstm = torch.nn.LSTM(4, 3)
    x = torch.randn(5, 2, 4)

    def emulated():
        with tf32.emulate_tf32():
            lstm(x)
        a_done.set()

    def other():
        a_inside.wait(5)
        with torch.backends.mkldnn.flags(enabled=False):
            b_entered.set()
            a_done.wait(5)

    try:
        _run(emulated, other)
        assert seen_in_a == [True]  # the LSTM's products ran with oneDNN as the user set it
        assert torch._C._get_mkldnn_enabled()
    finally:
        torch._C._set_mkldnn_enabled(True)


def test_lstm_rebuild_is_the_native_loop_bit_for_bit():
    # The emulator runs nn.LSTM (unpacked input) through a Python copy of ATen's native CPU
    # loop instead of switching oneDNN off; that copy must be the native loop exactly.
    import itertools

    from eigprec.tf32.opaque import lstm_native

    for layers, bi, batch_first, proj, bias, p in itertools.product(
        (1, 2), (False, True), (False, True), (0, 2), (True, False), (0.0, 0.5)
    ):
        torch.manual_seed(0)
        m = torch.nn.LSTM(4, 5, layers, bias, batch_first, p, bi, proj)
        x = torch.randn(6, 3, 4, requires_grad=True)
        batch, dirs = (6 if batch_first else 3), (2 if bi else 1)
        h0 = torch.randn(layers * dirs, batch, proj or 5)
        c0 = torch.randn(layers * dirs, batch, 5)
        torch.manual_seed(1)  # the same dropout masks on both sides
        with torch.backends.mkldnn.flags(enabled=False):
            want = m(x, (h0, c0))
            want = (want[0], *want[1])
        torch.manual_seed(1)
        got = lstm_native(x, (h0, c0), m._flat_weights, bias, layers, p, True, bi, batch_first)
        assert all(torch.equal(w, g) for w, g in zip(want, got, strict=True))
        grads = [
            torch.autograd.grad(sum(t.sum() for t in out), [x, *m.parameters()])
            for out in (want, got)
        ]
        assert all(torch.equal(w, g) for w, g in zip(*grads, strict=True))


# --- item 3: the emulated or audited CPU product does not hold the precision lock ---------


class _Probe(TorchDispatchMode):
    """Below the emulator on the mode stack: sees the CPU product it runs, and there lets
    another thread read the precision before the product goes on."""

    def __init__(self, reader: threading.Thread, read: threading.Event) -> None:
        super().__init__()
        self.reader, self.read = reader, read
        self.unblocked: list[bool] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is _aten.mm.default:
            self.default(*args, **(kwargs or {}))
        return func(*args, **(kwargs or {}))

    def default(self, *args, **kwargs):  # also stands in for aten.mm in the audit's side run
        if not self.unblocked:
            self.reader.start()
            self.unblocked.append(self.read.wait(1))  # False: the reader stayed blocked
        return _aten.mm.default(*args, **kwargs)


@pytest.mark.parametrize("context", ["emulate_tf32", "tf32_audit"])
@pytest.mark.parametrize("mode", ["high", "medium"])
def test_cpu_product_does_not_block_other_threads_reading_the_precision(monkeypatch, context, mode):
    # Before the fix _onednn.ieee_cpu held precision._LOCK for the whole product: another
    # thread's current_matmul_precision() waited until it ended (0.47 s for a 3000³ one).
    from eigprec import emulate_tf32

    read = threading.Event()
    answers: list[str] = []

    def reader():
        answers.append(current_matmul_precision())
        read.set()

    probe = _Probe(threading.Thread(target=reader), read)
    cm = contextlib.ExitStack()
    if context == "tf32_audit":  # its side product runs with every mode off
        monkeypatch.setitem(audit_mode._FUNCTIONAL, _aten.mm, probe)
    a = torch.randn(8, 8)
    before = raw_precision_state()
    with matmul_precision(mode):
        inside = raw_precision_state()
        with cm:
            if context == "emulate_tf32":
                cm.enter_context(probe)  # below the emulator: sees the product it runs
                cm.enter_context(emulate_tf32())
            else:
                cm.enter_context(tf32_audit())
            a @ a
        assert raw_precision_state() == inside
    probe.reader.join(10)
    assert raw_precision_state() == before
    assert probe.unblocked == [True]
    assert answers == [mode]  # the precision as set, not the pin of oneDNN to IEEE


def test_blocks_of_other_threads_during_a_pinned_product_restore_what_was_set(monkeypatch):
    # The audit holds no precision level: while its side product pins oneDNN to IEEE,
    # another thread may enter and leave a block of another mode. It must snapshot and
    # restore the value set ('bf16' at 'medium'), never the pin's 'ieee'.
    read = threading.Event()
    answers: list[str] = []

    def reader():
        with matmul_precision("highest"):
            answers.append(current_matmul_precision())
        answers.append(current_matmul_precision())
        read.set()

    probe = _Probe(threading.Thread(target=reader), read)
    monkeypatch.setitem(audit_mode._FUNCTIONAL, _aten.mm, probe)
    torch.set_float32_matmul_precision("medium")
    try:
        before = raw_precision_state()
        assert before["mkldnn"] == "bf16"
        a = torch.randn(8, 8)
        with tf32_audit():
            a @ a
        probe.reader.join(10)
        assert probe.unblocked == [True]
        assert answers == ["highest", "medium"]
        assert raw_precision_state() == before
    finally:
        torch.set_float32_matmul_precision("highest")
        torch.backends.mkldnn.matmul.fp32_precision = "none"
        torch.backends.cuda.matmul.fp32_precision = "none"
