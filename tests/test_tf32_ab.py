"""tf32_attribution: the end-to-end A/B of issue 19 item 3."""

from __future__ import annotations

import pytest
import torch

from eigprec.audit import tf32_attribution, tf32_audit

M, N = 2000, 50


def normal_equations(seed: int):
    """A (2000 x 50, cond 10), b, and a residual orthogonal to A's range (float32)."""
    g = torch.Generator().manual_seed(seed)
    u, _ = torch.linalg.qr(torch.randn(M, N, generator=g, dtype=torch.float64))
    v, _ = torch.linalg.qr(torch.randn(N, N, generator=g, dtype=torch.float64))
    a = (u * torch.logspace(0, -1, N, dtype=torch.float64)) @ v.T
    b = torch.randn(M, generator=g, dtype=torch.float64)
    r = b - u @ (u.T @ b)  # Aᵀr = 0: a product that is all cancellation
    return a.float(), b.float(), r.float().unsqueeze(1)


@pytest.mark.parametrize("seed", range(5))
def test_normal_equations_rank_the_gram_matrix_first(seed):
    a, b, r = normal_equations(seed)

    def block():
        x = torch.linalg.solve(a.T @ a, a.T @ b)  # Aᵀb: a gemv, float32 on a GPU
        check = a.T @ r  # orthogonality check: huge relative TF32 error, feeds nothing
        return {"x": x, "check": check}

    with tf32_audit() as report:
        block()
    # The per-product audit ranks the cancelling check first and AᵀA last ...
    assert [rec.shapes[1] for rec in report.records] == [(M, 1), (M, N)]
    gram_audit = report.records[1].norm_error
    found = tf32_attribution(lambda: {"x": block()["x"]})
    # ... the A/B ranks AᵀA first: it alone moves x, by more than its own error.
    first, second = found.sites
    assert first.shapes == ((N, M), (M, N)) and first.op == "mm"
    assert first.effects["x"] > 2 * gram_audit
    assert second.effects["x"] == 0.0
    assert found.outputs["x"] == pytest.approx(first.effects["x"], rel=1e-12)


def test_backward_sites_are_attributed_to_their_forward_line():
    w = torch.randn(8, 3, generator=torch.Generator().manual_seed(1))
    x = torch.randn(16, 8, generator=torch.Generator().manual_seed(2))

    def block():
        p = w.clone().requires_grad_()
        loss = (x @ p).square().sum()
        loss.backward()
        return {"loss": loss, "grad": p.grad}

    found = tf32_attribution(block)
    phases = sorted(s.phase for s in found.sites)
    assert phases == ["backward (MmBackward0)", "forward"]
    assert len({s.site for s in found.sites}) == 1  # both at the `x @ p` line
    assert found.outputs["loss"] > 0 and found.outputs["grad"] > 0


def test_refuses_bad_blocks():
    with pytest.raises(TypeError, match="callable"):
        tf32_attribution(3)
    with pytest.raises(TypeError, match="must return"):
        tf32_attribution(lambda: 3)
    with pytest.raises(ValueError, match="deterministic"):
        tf32_attribution(lambda: torch.randn(3))
    with pytest.raises(ValueError, match="rounding"):
        tf32_attribution(lambda: torch.ones(2), rounding="x")
