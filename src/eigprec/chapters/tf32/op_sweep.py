"""Which PyTorch operators TF32 changes on a GPU: the facts the CPU sweep test checks against.

One data place until a GPU record of the operator sweep exists (issue 34, "What to build"
item 1; the recorder step is to write ``book/data/``): names are those of PyTorch's OpInfo
database (``torch.testing._internal.common_methods_invocations.op_db``, ``OpInfo.full_name``).

Sources:

* :data:`MEASURED` -- the first operator sweep on an NVIDIA H200 (issue 34: op_db's own
  float32 samples, the matmul TF32 switch off and on; 624 operators in 71 s; 14 changed).
* :data:`AT_LARGER_SIZES` -- families the same issue reports changing at sizes beyond
  op_db's samples (256-1024 per matrix dimension, 64+ channels; tiny inputs take paths
  without tensor cores): ``bmm``, ``baddbmm``, ``einsum``, the convolutions (cuDNN's switch,
  on by default), and the solves and inverses (H200: ``linalg.solve`` 9.9e-5, ``inv``
  8.9e-5, ``solve_triangular`` 7.0e-5, ``lu_solve`` 9.9e-5).
* :data:`DERIVED` -- not measured alone: operators whose kernels are products of the two
  lists above (reason given for each). A GPU record replaces these with measurements.

Example:
    >>> "mm" in changed_ops() and "linalg.eigvalsh" not in changed_ops()
    True
"""

from __future__ import annotations

__all__ = ["AT_LARGER_SIZES", "DERIVED", "MEASURED", "SOLVES", "changed_ops"]

_H200 = "H200 first sweep, op_db samples (issue 34)"

#: op_db name -> source: changed by TF32 on the H200 at op_db's own sample sizes.
MEASURED: dict[str, str] = {
    name: _H200
    for name in (
        "matmul",
        "__rmatmul__",
        "mm",
        "addmm",
        "addmm.decomposed",
        "nn.functional.linear",
        "nn.functional.bilinear",
        "linalg.multi_dot",
        "tensordot",
        "addbmm",
        "nn.functional.multi_head_attention_forward",
        "linalg.pinv",
        "linalg.pinv.singular",
        "linalg.pinv.hermitian",
        "pinverse",
        "pca_lowrank",
        "svd_lowrank",
        "corrcoef",
    )
}

_LARGER = "changes at sizes beyond op_db's samples (issue 34)"
_SOLVE = "solve/inverse: H200 relative change ~1e-4 (issue 34)"

#: The solves, inverses and LU factorisations: on the CPU named, not emulated.
SOLVES: frozenset[str] = frozenset(
    {
        "linalg.solve",
        "linalg.solve_ex",
        "linalg.inv",
        "linalg.inv_ex",
        "linalg.solve_triangular",
        "linalg.lu_solve",
        "lu_solve",
        "triangular_solve",
        "linalg.lu_factor",
        "linalg.lu_factor_ex",
        "linalg.lu",
        "lu",
        "linalg.tensorinv",
        "linalg.tensorsolve",
    }
)

#: op_db name -> source: changed by TF32 on a GPU at larger sizes than op_db's samples.
AT_LARGER_SIZES: dict[str, str] = {
    **{
        name: _LARGER
        for name in (
            "bmm",
            "bmm.triton_optimized",
            "baddbmm",
            "einsum",
            "nn.functional.conv1d",
            "nn.functional.conv2d",
            "nn.functional.conv3d",
            "nn.functional.conv_transpose1d",
            "nn.functional.conv_transpose2d",
            "nn.functional.conv_transpose3d",
        )
    },
    **dict.fromkeys(SOLVES, _SOLVE),
}

#: op_db name -> why its kernel is a product of the families above (not measured alone).
DERIVED: dict[str, str] = {
    "cov": "(x - mean) @ (x - mean)ᵀ: one GEMM (corrcoef, built on it, changed on the H200)",
    "nn.functional.linear_cross_entropy": "a linear layer's GEMM, then cross entropy",
    "linalg.matrix_power": "repeated mm",
    "inner": "tensordot of the last dimensions: a GEMM for matrices",
    "chain_matmul": "a chain of mm, as linalg.multi_dot",
    "cdist": "its matrix-product path (large inputs) is one GEMM",
    "nn.functional.scaled_dot_product_attention": (
        "the math path's bmm's, which the CPU takes for op_db's samples; a GPU runs float32 "
        "in the memory-efficient kernel (3xTF32, about float32) where it applies"
    ),
}


def changed_ops() -> frozenset[str]:
    """The op_db names whose float32 results TF32 may change on a GPU (all three sources).

    Returns:
        A frozenset of ``OpInfo.full_name`` strings.

    Example:
        >>> "linalg.solve" in changed_ops()
        True
    """
    return frozenset({*MEASURED, *AT_LARGER_SIZES, *DERIVED})
