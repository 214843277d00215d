"""Precision blocks interleaved in one thread, and blocks misused (issue 21, items 5 and 14).

Torch's float32 matmul precision is process-wide, so two asyncio tasks (or two generators)
whose ``matmul_precision`` blocks interleave cannot both run at their own precision. The
decided behaviour: a task entering a block at another mode while another task of the same
thread holds one is refused (``RuntimeError``: waiting would block the event loop); the same
mode is shared; a block exited before one entered after it in the same task (generators
closed out of order) raises ``RuntimeError`` and the precision from before both is restored
when the later one exits. Hypothesis drives random interleavings of both.
"""

from __future__ import annotations

import asyncio
import threading

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from eigprec import current_matmul_precision, emulate_tf32, matmul_precision, tf32_audit
from eigprec.precision import _LEVELS, MATMUL_PRECISIONS

from ._precision_state import raw_precision_state

pytestmark = pytest.mark.skipif(
    not hasattr(torch.backends.cuda.matmul, "fp32_precision"),
    reason="fp32_precision settings exist from torch 2.9",
)

FAST = settings(max_examples=40, deadline=None, derandomize=True, database=None)


_raw = raw_precision_state


@pytest.fixture(autouse=True)
def _pristine():
    before = _raw()
    yield
    assert not _LEVELS
    assert _raw() == before


# --- generators closed in any order ------------------------------------------------------


def _block(mode):
    with matmul_precision(mode):
        yield


@st.composite
def _schedules(draw):
    n = draw(st.integers(1, 4))
    modes = draw(st.lists(st.sampled_from(MATMUL_PRECISIONS), min_size=n, max_size=n))
    events = [("open", i) for i in range(n)] + [("close", i) for i in range(n)]
    order = draw(st.permutations(events))
    # every generator opens before it closes: move each close after its open
    seen, pending, out = set(), [], []
    for kind, i in order:
        if kind == "open":
            seen.add(i)
            out.append((kind, i))
            out += [e for e in pending if e[1] == i]
            pending = [e for e in pending if e[1] != i]
        elif i in seen:
            out.append((kind, i))
        else:
            pending.append((kind, i))
    return modes, out


@FAST
@given(_schedules())
def test_generators_closed_in_any_order_restore_and_refuse_loudly(schedule):
    modes, events = schedule
    start = current_matmul_precision()
    before = _raw()
    gens = [_block(m) for m in modes]
    model: list[int] = []  # open generators, innermost last
    for kind, i in events:
        if kind == "open":
            next(gens[i])
            model.append(i)
        elif model[-1] == i:
            gens[i].close()
            model.pop()
        else:
            with pytest.raises(RuntimeError, match="exited before a block entered after it"):
                gens[i].close()
            model.remove(i)
        expected = modes[model[-1]] if model else start
        assert current_matmul_precision() == expected
    assert _raw() == before


def test_generator_case_from_the_issue_ends_at_the_start_precision():
    before = _raw()
    a, b = _block("high"), _block("medium")
    next(a)
    next(b)
    with pytest.raises(RuntimeError, match=r"'high'.*exited before"):
        a.close()
    assert current_matmul_precision() == "medium"  # b is still inside its block
    b.close()
    assert _raw() == before


# --- asyncio tasks --------------------------------------------------------------------------


async def _task(mode, delay, steps, seen):
    for _ in range(delay):
        await asyncio.sleep(0)
    try:
        with matmul_precision(mode):
            for _ in range(steps):
                seen.append(current_matmul_precision() == mode)
                await asyncio.sleep(0)
    except RuntimeError as e:
        assert "another asyncio task" in str(e)
        return "refused"
    return "ran"


@FAST
@given(
    st.lists(
        st.tuples(st.sampled_from(MATMUL_PRECISIONS), st.integers(0, 3), st.integers(1, 4)),
        min_size=1,
        max_size=4,
    )
)
def test_interleaved_tasks_run_at_their_own_precision_or_are_refused(tasks):
    before = _raw()
    seen: list[bool] = []

    async def main():
        return await asyncio.gather(*(_task(m, d, s, seen) for m, d, s in tasks))

    outcome = asyncio.run(main())
    assert all(seen), "a task ran at another task's precision"
    if len({m for m, _, _ in tasks}) == 1:
        assert set(outcome) == {"ran"}  # one mode: blocks share it
    for (mode, _, _), result in zip(tasks, outcome, strict=True):
        if result == "refused":
            assert any(m != mode for m, _, _ in tasks)
    assert _raw() == before


def test_task_case_from_the_issue():
    before = _raw()

    async def main():
        entered = asyncio.Event()

        async def a():
            with matmul_precision("high"):
                entered.set()
                await asyncio.sleep(0)
                await asyncio.sleep(0)
                return current_matmul_precision()

        async def b():
            await entered.wait()
            with matmul_precision("medium"):
                await asyncio.sleep(0)

        return await asyncio.gather(a(), b(), return_exceptions=True)

    got_a, got_b = asyncio.run(main())
    assert got_a == "high"
    assert isinstance(got_b, RuntimeError) and "another asyncio task" in str(got_b)
    assert _raw() == before


def test_tasks_nest_inside_a_block_of_the_code_that_runs_the_loop():
    async def inner():
        with matmul_precision("medium"):
            await asyncio.sleep(0)
            return current_matmul_precision()

    with matmul_precision("high"):
        assert asyncio.run(inner()) == "medium"
        assert current_matmul_precision() == "high"


def test_one_reusable_object_in_two_tasks_exits_each_tasks_own_block():
    cm = matmul_precision("high")

    async def use():
        with cm:
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            return current_matmul_precision()

    async def main():
        return await asyncio.gather(use(), use())

    assert asyncio.run(main()) == ["high", "high"]


# --- blocks exited where they were not entered ----------------------------------------


def test_exit_from_another_thread_is_refused_and_releases():
    before = _raw()
    cm = matmul_precision("medium")
    entered = threading.Event()

    def enter():
        cm.__enter__()
        entered.set()

    t = threading.Thread(target=enter)
    t.start()
    t.join(5)
    assert entered.is_set()
    with pytest.raises(RuntimeError, match=r"entered in another thread.*released"):
        cm.__exit__(None, None, None)
    assert _raw() == before
    got = []
    t = threading.Thread(target=lambda: got.append(_enter_and_read("high")))
    t.start()
    t.join(5)
    assert got == ["high"], "another thread's block was still blocked"


def _enter_and_read(mode):
    with matmul_precision(mode):
        return current_matmul_precision()


@pytest.mark.parametrize("make", [lambda: matmul_precision("high"), lambda: emulate_tf32()])
def test_exit_of_a_block_never_entered_is_a_clear_error(make):
    with pytest.raises(RuntimeError, match="never entered"):
        make().__exit__(None, None, None)


# --- item 14: arguments are checked when the object is made -----------------------------


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: matmul_precision("fast"), ValueError, "matmul precision must be one of"),
        (lambda: matmul_precision(), TypeError, "matmul_precision"),
        (lambda: emulate_tf32(rounding="x"), ValueError, "rounding must be one of"),
        (lambda: emulate_tf32(force=1), TypeError, "force must be a bool"),
        (lambda: tf32_audit(1, 2, 3), TypeError, "tf32_audit"),
        (lambda: tf32_audit(nonsense=1), TypeError, "tf32_audit"),
    ],
)
def test_bad_arguments_fail_at_the_call_not_at_with(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_emulate_tf32_exited_from_another_thread_releases_the_precision():
    cm = emulate_tf32()
    t = threading.Thread(target=cm.__enter__)
    t.start()
    t.join(5)
    assert _LEVELS  # the block pins the precision
    with pytest.raises(RuntimeError, match="entered in another thread"):
        cm.__exit__(None, None, None)
    assert not _LEVELS
    assert _enter_and_read("medium") == "medium"
