"""Torch's float32 matmul precision knobs, read for the precision tests' before/after checks."""

from __future__ import annotations

import torch


def raw_precision_state() -> dict[str, object]:
    """Every knob, read without letting a refusing getter stop the test.

    After the old and new APIs are mixed, torch's legacy getters raise ``RuntimeError``;
    such a knob reads ``"raises"``.
    """

    def read(get):
        try:
            return get()
        except RuntimeError:
            return "raises"

    return {
        "legacy": read(torch.get_float32_matmul_precision),
        "allow_tf32": read(lambda: torch.backends.cuda.matmul.allow_tf32),
        "global": torch.backends.fp32_precision,
        "cuda": torch.backends.cuda.matmul.fp32_precision,
        "mkldnn": torch.backends.mkldnn.matmul.fp32_precision,
    }
