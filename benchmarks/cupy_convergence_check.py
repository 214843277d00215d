"""How far converged and stopped float32/float64 batched Jacobi miss ‖A‖_F² (issue 33 item 3).

Run on a CUDA machine with CuPy: ``python benchmarks/cupy_convergence_check.py OUT.json``.
For random, Gram, graded and shifted symmetric batches at n = 16 … 1024, cuSOLVER's
``syevjBatched`` (through eigprec's bridge, before its failure test) with the default sweeps
and with 1, 2 and 3 sweeps; per case, the Frobenius miss |‖A‖_F² − Σ λ_i²| / (eps ‖A‖_F²) on A
scaled to unit largest entry, in units of n ulps (the bound of ``unconverged`` is
``_FRO_N · n + _FRO_ULPS``): the largest over converged matrices must lie under it, the
smallest over stopped ones above it.
"""

from __future__ import annotations

import json
import sys
import time

import torch

from eigprec.eig import cupy_solver as br


def _batch(kind: str, b: int, n: int, g: torch.Generator) -> torch.Tensor:
    B = torch.randn(b, n, n, generator=g, dtype=torch.float64)
    if kind == "random":
        return (B + B.mT) / 2
    if kind == "gram":
        C = B[..., : max(1, n // 2)]
        return C @ C.mT
    if kind == "graded":
        d = torch.logspace(0, -6, n, dtype=torch.float64)
        return d[:, None] * (B + B.mT) * d
    return (B + B.mT) / 2 + 100 * torch.eye(n, dtype=torch.float64)  # shifted


def _miss(a: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    n = a.shape[-1]
    scale = a.abs().amax((-2, -1)).double()
    A = a.double() / scale[:, None, None]
    ws = w.double() / scale[:, None]
    fro2 = A.square().sum((-2, -1))
    eps = torch.finfo(a.dtype).eps
    return (fro2 - ws.square().sum(-1)).abs() / (eps * fro2) / n


def main(out: str) -> None:
    import cupy

    rows, t0 = [], time.monotonic()
    for dtype in (torch.float32, torch.float64):
        for n in (16, 32, 64, 128, 256, 512, 1024):
            if dtype == torch.float64 and n > 256:
                continue
            b = max(2, min(256, 2**24 // (n * n)))
            for kind in ("random", "gram", "graded", "shifted"):
                g = torch.Generator().manual_seed(n)
                a = _batch(kind, b, n, g).to("cuda", dtype).contiguous()
                for sweeps in (None, 1, 2, 3):
                    x = a.clone()
                    w, _, info = br._syevj_batched(cupy.from_dlpack(x), True, False, sweeps)
                    w = torch.from_dlpack(w)
                    m = _miss(a, w)
                    fin = torch.isfinite(m)
                    rows.append(
                        {
                            "dtype": str(dtype).split(".")[-1],
                            "n": n,
                            "batch": b,
                            "kind": kind,
                            "sweeps": sweeps,
                            "info_nonzero": int((torch.from_dlpack(info) != 0).sum()),
                            "miss_max_n_ulps": float(m[fin].max()) if fin.any() else None,
                            "miss_min_n_ulps": float(m[fin].min()) if fin.any() else None,
                            "marked": int(br.unconverged(a, w, True).sum()),
                        }
                    )
                    print(json.dumps(rows[-1]), flush=True)
            if time.monotonic() - t0 > 60:
                break
    with open(out, "w") as f:
        json.dump(
            {
                "gpu": torch.cuda.get_device_name(),
                "torch": torch.__version__,
                "fro_bound": [br._FRO_N, br._FRO_ULPS],
                "rows": rows,
            },
            f,
            indent=1,
        )


if __name__ == "__main__":
    main(sys.argv[1])
