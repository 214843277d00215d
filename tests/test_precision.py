"""matmul_precision / current_matmul_precision: set, restore, nest, reject."""

import pytest
import torch

from eigprec import MATMUL_PRECISIONS, current_matmul_precision, matmul_precision

NEW_API = hasattr(torch.backends.cuda.matmul, "fp32_precision")


def _snapshot():
    state = {"current": current_matmul_precision()}
    if NEW_API:
        state |= {
            "global": torch.backends.fp32_precision,
            "cuda": torch.backends.cuda.matmul.fp32_precision,
            "mkldnn": torch.backends.mkldnn.matmul.fp32_precision,
        }
    return state


@pytest.fixture(autouse=True)
def _pristine():
    before = _snapshot()
    yield
    assert _snapshot() == before, "a test leaked precision state"


@pytest.mark.parametrize("mode", MATMUL_PRECISIONS)
def test_sets_mode_and_legacy_flag(mode):
    with matmul_precision(mode):
        assert current_matmul_precision() == mode
        assert torch.backends.cuda.matmul.allow_tf32 == (mode != "highest")
        if NEW_API:
            expected = "ieee" if mode == "highest" else "tf32"
            assert torch.backends.cuda.matmul.fp32_precision == expected
            # 'medium' is the one mode that lets oneDNN use bf16 on the CPU.
            mkldnn = torch.backends.mkldnn.matmul.fp32_precision
            assert (mkldnn == "bf16") == (mode == "medium")


def test_restores_after_exception_and_nesting():
    before = _snapshot()
    with pytest.raises(RuntimeError, match="boom"):
        with matmul_precision("high"):
            with matmul_precision("medium"):
                assert current_matmul_precision() == "medium"
            assert current_matmul_precision() == "high"
            raise RuntimeError("boom")
    assert _snapshot() == before
    # The legacy getter still answers: restoring did not leave a legacy/new mix.
    torch.get_float32_matmul_precision()
    torch.backends.cuda.matmul.allow_tf32  # noqa: B018


@pytest.mark.skipif(not NEW_API, reason="fp32_precision settings exist from torch 2.9")
def test_works_after_new_api_was_used():
    saved = (
        torch.get_float32_matmul_precision(),
        torch.backends.fp32_precision,
        torch.backends.cuda.matmul.fp32_precision,
        torch.backends.mkldnn.matmul.fp32_precision,
    )
    try:
        torch.backends.cuda.matmul.fp32_precision = "tf32"
        # torch's own legacy getter refuses to answer in this state ...
        with pytest.raises(RuntimeError):
            torch.get_float32_matmul_precision()
        # ... ours reads the new attributes instead.
        assert current_matmul_precision() == "high"
        with matmul_precision("highest"):
            assert current_matmul_precision() == "highest"
        assert torch.backends.cuda.matmul.fp32_precision == "tf32"
        assert current_matmul_precision() == "high"
    finally:
        # Exactly what was found (a suite run may start from another state than 'none').
        torch.set_float32_matmul_precision(saved[0])
        torch.backends.fp32_precision = saved[1]
        torch.backends.cuda.matmul.fp32_precision = saved[2]
        torch.backends.mkldnn.matmul.fp32_precision = saved[3]


@pytest.mark.parametrize("bad", ["HIGH", "low", "", None, 3, "tf32"])
def test_invalid_mode_names_allowed_values(bad):
    with pytest.raises(ValueError, match="'highest', 'high', 'medium'"):
        with matmul_precision(bad):
            pass
