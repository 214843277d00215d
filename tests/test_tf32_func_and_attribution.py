"""torch.func under emulate_tf32, tf32_attribution's comparisons, and false alarms of
BackwardAfterExitWarning (issue 35, items 6-8)."""

from __future__ import annotations

import math
import warnings

import pytest
import torch

from eigprec import BackwardAfterExitWarning, emulate_tf32, matmul_precision
from eigprec.audit import tf32_attribution

_g = torch.Generator().manual_seed(0)
_W = torch.randn(4, 4, generator=_g)
_X = torch.randn(3, 4, generator=_g)


def _f(w):
    return (_X @ w).sin().sum()


TRANSFORMS = {
    "grad": lambda: torch.func.grad(_f)(_W),
    "vjp": lambda: torch.func.vjp(_f, _W)[1](torch.tensor(1.0)),
    "jacrev": lambda: torch.func.jacrev(_f)(_W),
    "hessian": lambda: torch.func.hessian(_f)(_W),
    "vmap(grad)": lambda: torch.func.vmap(
        torch.func.grad(lambda w, x: (x @ w).sin().sum()), in_dims=(None, 0)
    )(_W, _X),
}


@pytest.mark.parametrize("name", TRANSFORMS)
def test_reverse_mode_torch_func_is_refused_with_the_way_around(name):
    with matmul_precision("high"), pytest.raises(RuntimeError) as caught:
        with emulate_tf32():
            TRANSFORMS[name]()
    message = str(caught.value)
    assert "emulate_tf32" in message
    assert "torch.autograd.grad" in message and "jvp" in message  # the ways around


def test_forward_mode_torch_func_works_and_is_emulated():
    with matmul_precision("high"), emulate_tf32():
        value, tangent = torch.func.jvp(_f, (_W,), (torch.ones_like(_W),))
        emulated = _f(_W)
    assert torch.equal(value, emulated) and not torch.equal(value, _f(_W))
    assert torch.isfinite(tangent)
    w = _W.clone().requires_grad_()
    with matmul_precision("high"), emulate_tf32():
        (grad,) = torch.autograd.grad(_f(w), [w])  # the reverse-mode way around
    assert grad.shape == w.shape


# --- item 8: BackwardAfterExitWarning only where a product was emulated ---------------------


def test_graph_without_products_does_not_warn_after_exit():
    a = torch.randn(3, 3)
    w = torch.randn(3, requires_grad=True)
    with matmul_precision("high"):
        with emulate_tf32():
            _ = a @ a  # an emulated product, outside the graph
            y = w.sigmoid()
            z = (w * 2).exp()
        with warnings.catch_warnings():
            warnings.simplefilter("error", BackwardAfterExitWarning)
            (y.sum() + z.sum()).backward()


def test_graph_with_a_product_still_warns_after_exit():
    a = torch.randn(3, 3)
    w = torch.randn(3, 3, requires_grad=True)
    with matmul_precision("high"):
        with emulate_tf32():
            y = (a @ w).sigmoid()
        with pytest.warns(BackwardAfterExitWarning):
            y.sum().backward()


# --- item 7: tf32_attribution's determinism check --------------------------------------------


def test_attribution_accepts_a_deterministic_block_with_nan():
    a = torch.tensor([[1.0, 1.0], [1.0, 1.0 + 2**-12]])

    def block():
        return {"x": a @ torch.tensor([[1.0], [-1.0]]), "nan": torch.tensor([math.nan, 1.0])}

    found = tf32_attribution(block)
    assert found.outputs["x"] == 1.0


def test_attribution_refuses_a_block_whose_outputs_change_shape():
    runs = []

    def block():
        runs.append(None)
        n = 2 if len(runs) < 3 else 3  # the third run (full TF32) returns another shape
        return torch.ones(n, 2) @ torch.ones(2, 2)

    with pytest.raises(ValueError, match="shape"):
        tf32_attribution(block)


def test_attribution_refuses_a_block_whose_output_names_change():
    runs = []

    def block():
        runs.append(None)
        name = "x" if len(runs) < 3 else "y"
        return {name: torch.ones(2, 2) @ torch.ones(2, 2)}

    with pytest.raises(ValueError, match="names"):
        tf32_attribution(block)
