"""Derivative formulas torch runs under at::NoTF32Guard stay float32 (issue 19 item 1).

On a TF32 GPU, products inside these formulas run in float32 whatever the settings say
(torch/csrc/autograd/FunctionsManual.cpp). Under emulate_tf32 their gradients must equal the
float32 gradients bit for bit, and tf32_audit must report no product from them.
"""

from __future__ import annotations

import pytest
import torch

from eigprec.audit import tf32_audit
from eigprec.precision import matmul_precision
from eigprec.tf32 import emulate_tf32

N = 24


def _spd(seed: int) -> torch.Tensor:
    a = torch.randn(N, N, generator=torch.Generator().manual_seed(seed))
    return a @ a.T / N + torch.eye(N)


def _weights(*shape: int) -> torch.Tensor:
    return torch.rand(*shape, generator=torch.Generator().manual_seed(99)) + 0.5


# Each loss reaches the guarded formula through elementwise ops only (no GEMM outside it).
FAMILIES = {
    "eigh": (
        "LinalgEighBackward0",
        lambda a: (torch.linalg.eigh(a)[1] ** 2 * _weights(N, N)).sum(),
    ),
    "svd": ("LinalgSvdBackward0", lambda a: (torch.linalg.svd(a)[0] ** 2 * _weights(N, N)).sum()),
    "cholesky": (
        "LinalgCholeskyExBackward0",
        lambda a: (torch.linalg.cholesky(a) * _weights(N, N)).sum(),
    ),
    "pinv": ("LinalgPinvBackward0", lambda a: (torch.linalg.pinv(a) * _weights(N, N)).sum()),
    "solve_triangular": (
        "LinalgSolveTriangularBackward0",
        lambda a: (
            torch.linalg.solve_triangular(a.tril() + N * torch.eye(N), _weights(N, 3), upper=False)
            * _weights(N, 3)
        ).sum(),
    ),
    "det": ("LinalgDetBackward0", lambda a: torch.linalg.det(a / 2)),
    "qr": ("LinalgQrBackward0", lambda a: (torch.linalg.qr(a)[1] * _weights(N, N)).sum()),
    # linalg_lu_backward, linalg_solve_backward and linalg_lu_solve_LU open with the guard
    # too (FunctionsManual.cpp at pytorch/pytorch@002ca67, and the pinned torch 2.13.0's
    # libtorch_cpu.so calls NoTF32Guard in them); lu_factor_ex's backward calls
    # linalg_lu_backward
    "lu": (
        "LinalgLuBackward0",
        lambda a: sum((f * _weights(N, N)).sum() for f in torch.linalg.lu(a)[1:]),
    ),
    "lu_factor": (
        "LinalgLuFactorExBackward0",
        lambda a: (torch.linalg.lu_factor(a)[0] * _weights(N, N)).sum(),
    ),
    "lu_solve": (
        "LinalgLuSolveBackward0",
        lambda a: (
            torch.linalg.lu_solve(*torch.linalg.lu_factor(a.detach()), a[:, :3]) * _weights(N, 3)
        ).sum(),
    ),
    "solve": (
        "LinalgSolveExBackward0",
        lambda a: (torch.linalg.solve(a, _weights(N, 3)) * _weights(N, 3)).sum(),
    ),
}


def _grad(loss_fn, a: torch.Tensor) -> torch.Tensor:
    x = a.clone().requires_grad_()
    loss_fn(x).backward()
    return x.grad


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_guarded_backward_is_float32_under_emulation(family):
    _, loss = FAMILIES[family]
    a = _spd(1)
    want = _grad(loss, a)
    with matmul_precision("high"), emulate_tf32():
        got = _grad(loss, a)
    assert torch.equal(got, want)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_audit_reports_nothing_from_guarded_backward(family):
    node, loss = FAMILIES[family]
    with tf32_audit() as report:
        _grad(loss, _spd(2))
    assert not [r for r in report.records if node in r.phase]


def test_unguarded_backward_is_still_emulated():
    # inv's backward has no guard: its products are TF32 on a GPU, so here they change.
    a = _spd(3)

    def loss(x):
        return (torch.linalg.inv(x) * _weights(N, N)).sum()

    want = _grad(loss, a)
    with matmul_precision("high"), emulate_tf32():
        got = _grad(loss, a)
    assert not torch.equal(got, want)
    with tf32_audit() as report:
        _grad(loss, a)
    assert any("LinalgInvExBackward0" in r.phase for r in report.records)


# Forward-mode formulas torch guards the same way (linalg_solve_jvp, linalg_lu_jvp,
# cholesky_jvp, linalg_svd_jvp): they run inside the primal operator, outside any autograd
# node; the emulator marks those calls from Python (failed before: rounded). The audit
# does not (a function mode would switch off torch's transformer fast path).
JVP_FAMILIES = {
    "solve": lambda x: torch.linalg.solve(x, _weights(N, 3)),
    "lu": lambda x: torch.linalg.lu(x)[2],
    "lu_factor": lambda x: torch.linalg.lu_factor(x)[0],
    "cholesky": lambda x: torch.linalg.cholesky((x + x.mT) / 2),  # x = R + N·I: SPD
    "svd": lambda x: torch.linalg.svd(x)[1],
}


# The other forward-mode formulas guarded in torch 2.13.0 (its libtorch_cpu.so calls
# at::NoTF32Guard's constructor in cholesky_inverse_jvp, cholesky_solve_jvp, linalg_eig_jvp,
# linalg_lstsq_solution_jvp and _residuals_jvp, linalg_qr_jvp,
# linalg_solve_triangular_forward_AD, pinv_jvp and linalg_matrix_exp_differential, which
# serves matrix_exp's jvp): failed before (rounded), as the five above once did.
JVP_FAMILIES.update(
    {
        "eigh": lambda x: torch.linalg.eigh(x + x.mT)[1],
        "eigvalsh": lambda x: torch.linalg.eigvalsh(x + x.mT),
        "qr": lambda x: torch.linalg.qr(x)[1],
        "lstsq": lambda x: torch.linalg.lstsq(x, _weights(N, 3)).solution,
        "solve_triangular": lambda x: torch.linalg.solve_triangular(
            x.triu(), _weights(N, 3), upper=True
        ),
        "cholesky_solve": lambda x: torch.cholesky_solve(_weights(N, 3), x.tril()),
        "cholesky_inverse": lambda x: torch.cholesky_inverse(x.tril()),
        "pinv": lambda x: torch.linalg.pinv(x),
        "matrix_exp": lambda x: torch.linalg.matrix_exp(x / (2 * N)),
        "svdvals": lambda x: torch.linalg.svdvals(x),
    }
)


@pytest.mark.parametrize("name", sorted(JVP_FAMILIES))
def test_guarded_jvp_is_float32_under_emulation(name):
    gen = torch.Generator().manual_seed(5)
    a = torch.randn(N, N, generator=gen) + N * torch.eye(N)
    da = torch.randn(N, N, generator=gen)
    fn = JVP_FAMILIES[name]
    want = torch.func.jvp(fn, (a,), (da,))[1]
    with matmul_precision("high"), emulate_tf32():
        got = torch.func.jvp(fn, (a,), (da,))[1]
    assert torch.equal(got, want)


def test_guarded_calls_hide_no_primal_product():
    # The emulator marks a whole call of GUARDED_JVP_FUNCS: right only because no product of
    # the primal computation reaches a dispatch mode (LAPACK, or a kernel that multiplies
    # out of sight), so whatever the mode sees inside the call is the jvp formula's.
    from torch.utils._python_dispatch import TorchDispatchMode

    from eigprec.tf32.dispatch import CONVS, GEMMS, GUARDED_JVP_FUNCS

    class Products(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.seen = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func.overloadpacket in GEMMS or func.overloadpacket in CONVS:
                self.seen.append(func.overloadpacket.__name__)
            return func(*args, **(kwargs or {}))

    class Calls(torch.overrides.TorchFunctionMode):
        def __init__(self):
            super().__init__()
            self.called = set()

        def __torch_function__(self, func, types, args=(), kwargs=None):
            self.called.add(func)
            return func(*args, **(kwargs or {}))

    gen = torch.Generator().manual_seed(6)
    a = torch.randn(N, N, generator=gen) + N * torch.eye(N)
    calls = Calls()
    fns = [
        *JVP_FAMILIES.values(),
        torch.linalg.eig,
        torch.linalg.eigvals,
        torch.linalg.lu_factor_ex,
        lambda x: torch.linalg.cholesky_ex((x + x.mT) / 2),
        lambda x: torch.linalg.solve_ex(x, _weights(N, 3)),
        lambda x: torch.linalg.lu_solve(*torch.linalg.lu_factor(x), _weights(N, 3)),
    ]
    for fn in fns:
        products = Products()
        with calls, products:
            fn(a)
        assert products.seen == [], fn
    assert GUARDED_JVP_FUNCS <= calls.called  # every marked function was tried here


def test_products_around_a_guarded_call_are_still_emulated():
    a = _spd(4)
    b = torch.full((N, N), 1 + 2**-12)
    with matmul_precision("high"), emulate_tf32():
        x = torch.linalg.solve(a, b) @ b  # the product after the call is TF32 again
    assert not torch.equal(x, torch.linalg.solve(a, b) @ b)
