"""matmul_precision across threads and after mixed old/new API use (issue 12, items 9, 13)."""

import threading
import time

import pytest
import torch

from eigprec import current_matmul_precision, describe_runtime, matmul_precision

from ._precision_state import raw_precision_state

pytestmark = pytest.mark.skipif(
    not hasattr(torch.backends.cuda.matmul, "fp32_precision"),
    reason="fp32_precision settings exist from torch 2.9",
)


_raw = raw_precision_state


@pytest.fixture(autouse=True)
def _pristine():
    before = _raw()
    yield
    torch.set_float32_matmul_precision("highest")
    torch.backends.fp32_precision = "none"
    torch.backends.cuda.matmul.fp32_precision = "none"
    torch.backends.mkldnn.matmul.fp32_precision = "none"
    assert _raw() == before == _raw()


# --- item 9: provenance reports what runs, restore is exact ------------------------------


def test_new_api_tf32_then_medium_block_reports_what_runs():
    torch.backends.cuda.matmul.fp32_precision = "tf32"
    before = _raw()
    assert current_matmul_precision() == "high"
    with matmul_precision("medium"):
        assert current_matmul_precision() == "medium"
    # cuBLAS at tf32, oneDNN at ieee: that is 'high', and the state is the one before
    assert _raw() == before
    assert current_matmul_precision() == "high"
    assert describe_runtime().matmul_precision == "high"


def test_mkldnn_bf16_then_high_block_leaves_getters_answering():
    torch.backends.mkldnn.matmul.fp32_precision = "bf16"
    before = _raw()
    assert before["allow_tf32"] is False
    with matmul_precision("high"):
        assert current_matmul_precision() == "high"
    assert _raw() == before
    assert torch.backends.cuda.matmul.allow_tf32 is False  # does not start raising
    assert current_matmul_precision() == "highest"  # cuBLAS runs IEEE float32


@pytest.mark.parametrize(
    "setup",
    [
        lambda: None,
        lambda: setattr(torch.backends.cuda.matmul, "fp32_precision", "tf32"),
        lambda: setattr(torch.backends.mkldnn.matmul, "fp32_precision", "bf16"),
        lambda: setattr(torch.backends.mkldnn.matmul, "fp32_precision", "tf32"),
        lambda: setattr(torch.backends, "fp32_precision", "tf32"),
        lambda: torch.set_float32_matmul_precision("medium"),
        lambda: (
            torch.set_float32_matmul_precision("high"),
            setattr(torch.backends.cuda.matmul, "fp32_precision", "ieee"),
        ),
    ],
    ids=["default", "cuda tf32", "mkldnn bf16", "mkldnn tf32", "global tf32", "medium", "mix"],
)
@pytest.mark.parametrize("mode", ["highest", "high", "medium"])
def test_every_mixed_state_restored_exactly(setup, mode):
    setup()
    before = _raw()
    with matmul_precision(mode):
        assert current_matmul_precision() == mode
        with matmul_precision("highest"):
            assert current_matmul_precision() == "highest"
        assert current_matmul_precision() == mode
    assert _raw() == before


# --- item 13: threads ---------------------------------------------------------------------


def test_overlapping_blocks_in_two_threads_are_serialised():
    events = []
    a_inside = threading.Event()

    def a():
        with matmul_precision("high"):
            events.append(("a in", current_matmul_precision()))
            a_inside.set()
            time.sleep(0.2)  # b asks for 'medium' meanwhile and must wait
            events.append(("a still", current_matmul_precision()))
        events.append(("a out", None))

    def b():
        a_inside.wait()
        with matmul_precision("medium"):
            events.append(("b in", current_matmul_precision()))
        events.append(("b out", None))

    threads = [threading.Thread(target=a), threading.Thread(target=b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert [e[0] for e in events] == ["a in", "a still", "a out", "b in", "b out"]
    assert events[0][1] == events[1][1] == "high" and events[3][1] == "medium"
    assert current_matmul_precision() == "highest"


def test_blocks_of_the_same_mode_share_and_the_last_restores():
    inside = threading.Barrier(2)
    seen = []

    def worker(hold):
        with matmul_precision("high"):
            inside.wait(5)  # both are inside at once: they shared the level
            time.sleep(hold)
            seen.append(current_matmul_precision())

    threads = [threading.Thread(target=worker, args=(h,)) for h in (0.0, 0.2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert seen == ["high", "high"]  # the first to leave did not restore early
    assert current_matmul_precision() == "highest"


def test_many_threads_each_see_their_mode_and_the_process_ends_where_it_began():
    torch.backends.cuda.matmul.fp32_precision = "tf32"  # a mixed legacy/new start
    before = _raw()
    wrong = []

    def worker(k):
        for i in range(30):
            mode = ("highest", "high", "medium")[(k + i) % 3]
            with matmul_precision(mode):
                for _ in range(3):
                    if current_matmul_precision() != mode:
                        wrong.append((k, i, mode, current_matmul_precision()))
                    time.sleep(0)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads)
    assert wrong == []
    assert _raw() == before


def test_two_emulating_threads_changing_precision_get_an_error_not_a_hang():
    from eigprec import emulate_tf32

    both_pinned = threading.Barrier(2)
    outcomes = []

    def worker():
        try:
            with emulate_tf32():
                both_pinned.wait(5)
                with matmul_precision("high"):
                    time.sleep(0.05)
            outcomes.append("ok")
        except RuntimeError as err:
            assert "would deadlock" in str(err)
            outcomes.append("refused")

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert not any(t.is_alive() for t in threads)
    assert sorted(outcomes) == ["ok", "refused"]
    assert current_matmul_precision() == "highest"


def test_entering_the_precision_first_lets_emulating_threads_share():
    from eigprec import emulate_tf32

    both_inside = threading.Barrier(2)
    outcomes = []

    def worker():
        with matmul_precision("high"), emulate_tf32():
            both_inside.wait(5)
            with matmul_precision("high"):  # same mode: shared, no wait
                outcomes.append(current_matmul_precision())

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert outcomes == ["high", "high"]
    assert current_matmul_precision() == "highest"
