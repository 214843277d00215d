"""``matmul_precision`` and ``emulate_tf32`` as decorators of generators and coroutines.

Issue 47, item 5: as decorators they entered the block around the *call*, which for a
generator or an ``async def`` function only creates the generator or coroutine: the body
ran later, outside the block (``@matmul_precision("high")`` on a generator: body at
'highest'; ``@emulate_tf32()`` on a generator inside a 'high' block: a product of
1.000976800918579, not the emulated 1.0019540786743164). Decided: the block is entered each
time the body runs and left each time it gives control back -- at every ``yield`` of a
generator and every suspending ``await`` of a coroutine -- so the body always runs inside
it and the caller, or another task, always runs outside it. Async generators are refused
with ``TypeError`` when decorated.
"""

from __future__ import annotations

import asyncio
import inspect

import pytest
import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

from eigprec import current_matmul_precision, emulate_tf32, matmul_precision

from ._precision_state import raw_precision_state

A = torch.tensor([[1 + 2**-11]])
B = torch.ones(1, 2)  # two columns: a GEMM, which the emulator rounds at 'high'
EMULATED = (1 + 2**-10) * 1.0  # the operand rounded to TF32
PLAIN = 1 + 2**-11


def test_a_decorated_generator_runs_its_body_in_the_block_and_yields_outside_it():
    before = raw_precision_state()
    seen = []

    @matmul_precision("high")
    def gen():
        seen.append(current_matmul_precision())
        sent = yield current_matmul_precision()
        seen.append((sent, current_matmul_precision()))
        yield current_matmul_precision()
        return "done"

    assert inspect.isgeneratorfunction(gen) and gen.__name__ == "gen"
    with matmul_precision("highest"):
        it = gen()
        assert seen == []  # created, not started
        assert next(it) == "high"
        assert current_matmul_precision() == "highest"  # the caller, between yields
        assert it.send("x") == "high"
        assert current_matmul_precision() == "highest"
        with pytest.raises(StopIteration) as stop:
            next(it)
    assert stop.value.value == "done"
    assert seen == ["high", ("x", "high")]
    assert raw_precision_state() == before


def test_yield_from_a_decorated_generator_keeps_its_return_value():
    @matmul_precision("medium")
    def inner():
        yield current_matmul_precision()
        return current_matmul_precision()

    def outer():
        result = yield from inner()
        yield ("returned", result)

    with matmul_precision("highest"):
        assert list(outer()) == ["medium", ("returned", "medium")]


def test_close_and_throw_reach_the_body_inside_the_block():
    before = raw_precision_state()
    seen = []

    @matmul_precision("high")
    def gen():
        try:
            yield 1
            yield 2
        except KeyError:
            seen.append(("caught", current_matmul_precision()))
            yield 3
        finally:
            seen.append(("finally", current_matmul_precision()))

    it = gen()
    next(it)
    assert it.throw(KeyError("k")) == 3
    it.close()
    assert seen == [("caught", "high"), ("finally", "high")]
    it = gen()
    next(it)
    with pytest.raises(ValueError, match="boom"):
        it.throw(ValueError("boom"))  # not caught by the body: raised out, block left
    assert raw_precision_state() == before


def test_emulate_tf32_decorates_a_generator():
    @emulate_tf32()
    def products():
        yield (A @ B)[0, 0].item()
        yield (A @ B)[0, 0].item()

    with matmul_precision("high"):
        it = products()
        assert next(it) == EMULATED
        assert (A @ B)[0, 0].item() == PLAIN  # between yields: not emulated
        assert next(it) == EMULATED


def test_a_decorated_coroutine_runs_in_the_block_and_awaits_outside_it():
    before = raw_precision_state()

    @matmul_precision("high")
    async def body(log, go):
        log.append(("start", current_matmul_precision()))
        await go.wait()
        log.append(("after await", current_matmul_precision()))
        return current_matmul_precision()

    async def watcher(log, go):  # runs while body waits for it
        log.append(("other task", current_matmul_precision()))
        go.set()

    async def main():
        log, go = [], asyncio.Event()
        result, _ = await asyncio.gather(body(log, go), watcher(log, go))
        return result, log

    assert inspect.iscoroutinefunction(body)
    result, log = asyncio.run(main())
    assert result == "high"
    assert log == [("start", "high"), ("other task", "highest"), ("after await", "high")]
    assert raw_precision_state() == before


def test_decorated_coroutines_at_other_modes_interleave_without_refusal():
    # Held across an await, the two tasks' blocks would refuse each other (torch's precision
    # is process-wide); entered only while each body runs, each runs at its own mode.
    async def at(mode, log):
        @matmul_precision(mode)
        async def body():
            for _ in range(3):
                log.append((mode, current_matmul_precision()))
                await asyncio.sleep(0)

        await body()

    async def main():
        log = []
        await asyncio.gather(at("high", log), at("medium", log))
        return log

    log = asyncio.run(main())
    assert len(log) == 6 and all(mode == seen for mode, seen in log)


def test_emulate_tf32_decorates_a_coroutine():
    @emulate_tf32()
    async def product():
        await asyncio.sleep(0)
        return (A @ B)[0, 0].item()

    with matmul_precision("high"):
        assert asyncio.run(product()) == EMULATED


def test_a_cancelled_decorated_coroutine_leaves_the_block():
    before = raw_precision_state()
    seen = []

    @matmul_precision("high")
    async def sleeper():
        try:
            await asyncio.sleep(10)
        finally:
            seen.append(current_matmul_precision())

    async def main():
        task = asyncio.ensure_future(sleeper())
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert seen == ["high"]
    assert raw_precision_state() == before


@pytest.mark.parametrize("make", [lambda: matmul_precision("high"), lambda: emulate_tf32()])
def test_an_async_generator_function_is_refused(make):
    async def agen():
        yield 1

    with pytest.raises(TypeError, match="async generator"):
        make()(agen)


def test_a_body_that_keeps_its_own_block_open_across_a_yield_is_closed_and_refused():
    # The decorator's block would have to be left while the body's own block, entered after
    # it, is still open: with emulate_tf32 that popped the body's mode instead of its own
    # and left it active in the caller. The body is closed (its blocks left innermost
    # first) and the step refused.
    before = raw_precision_state()
    closed = []

    def make(outer, inner):
        @outer
        def gen():
            try:
                with inner:
                    yield 1
            finally:
                closed.append(current_matmul_precision())

        return gen

    cases = [
        (matmul_precision("high"), matmul_precision("highest")),
        (emulate_tf32(), emulate_tf32(rounding="rne")),
    ]
    with matmul_precision("medium"):
        for outer, inner in cases:
            it = make(outer, inner)()
            with pytest.raises(RuntimeError, match="kept a matmul_precision or emulate_tf32"):
                next(it)
            assert current_matmul_precision() == "medium"
            assert _get_current_dispatch_mode_stack() == []
    assert closed == ["high", "medium"]
    assert raw_precision_state() == before
