"""What TF32 does not touch stays bit for bit under the emulator and the audit (issue 34).

With a dispatch mode active ATen's composites take the eigenvector path for eigenvalues
(``isTensorSubclassLike`` makes ``_may_require_fw_or_bw_grad`` true): ``eigvalsh`` moved by
5.1e-5 and ``svdvals`` by 2.1e-5 at n = 256 under either context, where a TF32 GPU changes
neither. And the measured H100 (length 256) and H200 (4096) run ``vector @ matrix`` in
float32 at 'high', which the emulator rounded.
"""

from __future__ import annotations

import pytest
import torch

from eigprec import emulate_tf32, matmul_precision
from eigprec.audit import tf32_audit

_g = torch.Generator().manual_seed(0)
_A = torch.randn(256, 256, generator=_g)
_S = _A + _A.T
_V = torch.randn(4096, generator=_g)
_M = torch.randn(4096, 64, generator=_g)
_W = torch.randn(64, 4096, generator=_g)

CALLS = {
    "eigvalsh": lambda: torch.linalg.eigvalsh(_S),
    "eigvalsh (upper)": lambda: torch.linalg.eigvalsh(_S, UPLO="U"),
    "eigh values": lambda: torch.linalg.eigh(_S)[0],
    "svdvals": lambda: torch.linalg.svdvals(_A),
    "eigvals": lambda: torch.linalg.eigvals(_A),
    "matrix_norm(2)": lambda: torch.linalg.matrix_norm(_A, 2),
    "matrix_norm(nuc)": lambda: torch.linalg.matrix_norm(_A, "nuc"),
    "norm(2)": lambda: torch.linalg.norm(_A, 2),
    "cond": lambda: torch.linalg.cond(_A),
    "torch.norm(nuc)": lambda: torch.norm(_A, "nuc"),
    "Tensor.norm(nuc)": lambda: _A.norm("nuc"),
    "nuclear_norm": lambda: torch.nuclear_norm(_A),
    "matrix_rank": lambda: torch.linalg.matrix_rank(_A),
    "vector @ matrix": lambda: _V @ _M,
    "torch.matmul(vector, matrix)": lambda: torch.matmul(_V, _M),
    "F.linear on a vector": lambda: torch.nn.functional.linear(_V, _W),
    "matrix @ vector": lambda: _W @ _V,
}

CONTEXTS = {"emulate_tf32": emulate_tf32, "tf32_audit": tf32_audit}


@pytest.mark.parametrize("context", CONTEXTS)
@pytest.mark.parametrize("name", CALLS)
def test_bit_for_bit_the_plain_result_at_high(context, name):
    plain = CALLS[name]()
    with matmul_precision("high"), CONTEXTS[context]():
        got = CALLS[name]()
    assert torch.equal(got, plain)


@pytest.mark.parametrize("context", CONTEXTS)
def test_with_gradients_the_vector_path_is_the_plain_one_too(context):
    s = _S.clone().requires_grad_()
    plain = torch.linalg.eigvalsh(s)
    with matmul_precision("high"), CONTEXTS[context]():
        got = torch.linalg.eigvalsh(s)
    assert torch.equal(got, plain)
    got.sum().backward()
    assert s.grad is not None


def test_matrix_products_are_still_emulated():
    b = _A[:2]  # two rows: a GEMM the GPU runs in TF32
    with matmul_precision("high"), emulate_tf32():
        got = b @ _A
    assert not torch.equal(got, b @ _A)
