"""Which PyTorch operators TF32 changes on a GPU: the facts the CPU sweep test checks against.

Names are those of PyTorch's OpInfo database
(``torch.testing._internal.common_methods_invocations.op_db``, ``OpInfo.full_name``). The GPU
record of the sweep (``python -m eigprec_book.record ops``; ``book/data/ops_gpu.json``, an H200 with
torch 2.11 on 27 November 2026) is summarised by :func:`sweep_summary`; the CPU sweep test
holds these lists to it: every operator it saw change is in :func:`changed_ops`, and every
sized probe it saw change at some size belongs to a family listed here. That record's first
op_db sample per operator changed 8 operators (all of them in :data:`MEASURED`, which holds
every sample's verdict of the first sweep); its sized probes changed ``inv`` and
``solve_triangular`` from n = 1024 and left ``linalg.solve`` (4 right-hand sides),
``lu_factor`` and ``lu_solve`` unchanged up to 1024, where the issue's H200 measurement saw
``solve`` change by 9.9e-5: :data:`SOLVES` stay named, not claimed exact.

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

__all__ = [
    "AT_LARGER_SIZES",
    "DERIVED",
    "MEASURED",
    "PROBE_OPS",
    "SOLVES",
    "changed_ops",
    "kept_float32",
    "sweep_summary",
]

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


#: The recorder's sized probes (:data:`eigprec_book.record.ops.PROBES`) and the op_db names they
#: stand for.
PROBE_OPS: dict[str, str] = {
    "mm": "mm",
    "vecmat": "matmul (vector @ matrix)",
    "matvec": "mv",
    "bmm": "bmm",
    "baddbmm": "baddbmm",
    "einsum": "einsum",
    "linear": "nn.functional.linear",
    "sdpa": "nn.functional.scaled_dot_product_attention",
    "conv1d": "nn.functional.conv1d",
    "conv2d": "nn.functional.conv2d",
    "conv3d": "nn.functional.conv3d",
    "conv_transpose2d": "nn.functional.conv_transpose2d",
    "lstm": "nn.LSTM (cuDNN)",
    "solve": "linalg.solve",
    "inv": "linalg.inv",
    "solve_triangular": "linalg.solve_triangular",
    "lu_factor": "linalg.lu_factor",
    "lu_solve": "linalg.lu_solve",
    "cholesky": "linalg.cholesky",
    "cholesky_solve": "cholesky_solve",
    "qr": "linalg.qr",
    "lstsq": "linalg.lstsq",
    "eigvalsh": "linalg.eigvalsh",
    "eigh": "linalg.eigh",
    "svdvals": "linalg.svdvals",
    "pinv": "linalg.pinv",
    "det": "linalg.slogdet",
}

_CONV = ("conv1d", "conv2d", "conv3d", "conv_transpose2d", "lstm")


def sweep_summary(record: dict) -> dict:
    """What an operator-sweep record says, in the terms the TF32 details page uses.

    Args:
        record: a ``python -m eigprec_book.record ops`` record (schema
            ``eigprec.bench.ops/1``).

    Returns:
        ``{"gpu", "torch", "operators", "changed_matmul", "changed_cudnn", "not_repeatable",
        "changed", "probes"}``: counts over op_db's operators measured, the names that
        changed, and per sized probe the op name, the size (matrix dimension, or channels
        for convolutions and the LSTM) from which the matmul or cuDNN switch changed it
        (None: at no size measured), the largest relative change, and whether every size
        repeated bit for bit.

    Raises:
        ValueError: if ``record`` is not an operator-sweep record.

    Example:
        >>> sweep_summary({"schema": "x"})
        Traceback (most recent call last):
        ...
        ValueError: not an operator-sweep record (schema 'x')
    """
    if not isinstance(record, dict) or record.get("schema") != "eigprec.bench.ops/1":
        schema = record.get("schema") if isinstance(record, dict) else None
        raise ValueError(f"not an operator-sweep record (schema {schema!r})")
    counts = record["counts"]
    probes = []
    for row in record["probes"]:
        name = row["probe"]
        sizes = {int(n): m for n, m in row["sizes"].items()}
        starts = {k: v for k, v in row["starts_at"].items() if v is not None}
        switch = min(starts, key=starts.get) if starts else None
        start = starts.get(switch) if switch else None
        if start is not None and name in _CONV:
            start = max(start // 4, 4)  # the recorder's channels: n // 4
        changes = [
            max((m.get("change") or {}).get(k) or 0.0 for k in ("matmul", "cudnn"))
            for m in sizes.values()
            if m.get("changed")
        ]
        probes.append(
            {
                "probe": name,
                "op": PROBE_OPS.get(name, name),
                "switch": switch,
                "starts_at": start,
                "largest_change": max(changes) if changes else 0.0,
                "repeatable": all(all(m.get("repeatable", {}).values()) for m in sizes.values()),
            }
        )
    return {
        "gpu": record["provenance"].get("gpu"),
        "torch": record["provenance"].get("torch"),
        "operators": counts["measured"],
        "changed_matmul": counts["changed_matmul"],
        "changed_cudnn": counts["changed_cudnn"],
        "not_repeatable": counts["not_repeatable"],
        "changed": sorted(r["op"] for r in record["operators"] if r.get("changed")),
        "probes": probes,
    }


def kept_float32(record: dict) -> dict[str, dict]:
    """Per sized probe of an operator-sweep record: up to which size the GPU kept it float32.

    Args:
        record: a ``python -m eigprec_book.record ops`` record.

    Returns:
        ``{probe: {"kept": size or None, "from": size or None, "unit": "n" or "channels"}}``:
        the largest size measured unchanged below every size that changed (sizes that did
        not repeat bit for bit are not judged), and the smallest that changed; channels
        for the convolutions and the LSTM (the recorder's n // 4, at least 4).

    Raises:
        ValueError: if ``record`` is not an operator-sweep record.

    Example:
        >>> kept_float32({"schema": "eigprec.bench.ops/1", "probes": [{"probe": "bmm",
        ...     "sizes": {"16": {"repeatable": {"off": True}, "changed": []},
        ...               "64": {"repeatable": {"off": True}, "changed": ["matmul"]}}}]})
        {'bmm': {'kept': 16, 'from': 64, 'unit': 'n'}}
    """
    if not isinstance(record, dict) or record.get("schema") != "eigprec.bench.ops/1":
        raise ValueError("not an operator-sweep record")
    out = {}
    for row in record["probes"]:
        conv = row["probe"] in _CONV
        judged = {
            int(n): bool(m.get("changed"))
            for n, m in row["sizes"].items()
            if "changed" in m and all(m["repeatable"].values())
        }
        changed = [n for n, c in judged.items() if c]
        first = min(changed) if changed else None
        kept = [n for n, c in judged.items() if not c and (first is None or n < first)]

        def unit(n: int | None, conv: bool = conv) -> int | None:
            return None if n is None else (max(n // 4, 4) if conv else n)

        out[row["probe"]] = {
            "kept": unit(max(kept) if kept else None),
            "from": unit(first),
            "unit": "channels" if conv else "n",
        }
    return out
