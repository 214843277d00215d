"""describe_runtime: a frozen, truthful provenance record that renders as a box."""

import dataclasses
import html as html_module
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from eigprec_book.helpers import full_scale, quick_scale

import eigprec
from eigprec import describe_runtime, matmul_precision


def test_fields_match_this_machine():
    info = describe_runtime()
    assert info.torch_version == torch.__version__
    assert info.numpy_version == np.__version__
    assert info.python_version.startswith(f"{sys.version_info.major}.{sys.version_info.minor}")
    assert info.tf32_emulated is (not info.tf32_hardware)
    if torch.cuda.is_available():
        assert info.device == "cuda"
        assert info.compute_capability == tuple(torch.cuda.get_device_capability())
        expected = torch.version.hip is None and info.compute_capability >= (8, 0)
        assert info.tf32_hardware is expected
    else:
        assert info.device == "cpu"
        assert info.compute_capability is None
        assert info.tf32_hardware is False


def test_is_frozen():
    info = describe_runtime()
    with pytest.raises(dataclasses.FrozenInstanceError):
        info.device = "tpu"  # type: ignore[misc]


def test_reads_current_precision():
    with matmul_precision("high"):
        assert describe_runtime().matmul_precision == "high"
    with matmul_precision("highest"):
        assert describe_runtime().matmul_precision == "highest"


def test_cupy_not_imported(tmp_path):
    # In a fresh interpreter: in this one, the CuPy bridge's tests import CuPy on a GPU
    # machine. A stand-in cupy first on the path leaves a mark when imported, so an eager
    # import fails this test on a machine without CuPy too (and shadows a real one).
    stand_in = tmp_path / "cupy"
    stand_in.mkdir()
    mark = tmp_path / "imported"
    (stand_in / "__init__.py").write_text(f"open({str(mark)!r}, 'w').close()\n")
    code = "import sys, eigprec, eigprec_book.helpers; eigprec.describe_runtime(); "
    code += "print('cupy' in sys.modules)"
    path = os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))
    proc = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": path},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False"] and not mark.exists()


def test_renders_as_text_and_html():
    info = describe_runtime()
    text = str(info)
    html = info._repr_html_()
    for needle in ("Executed on", "TF32", info.torch_version):
        assert needle in text
        assert needle in html
    assert ("emulated" in text) == info.tf32_emulated
    assert html.startswith("<details") and "<table" in html


def test_html_box_is_collapsed_and_its_summary_names_device_and_tf32_mode():
    # Issue 23: the provenance box comes collapsed after a page's question; closed, it
    # still says where the page ran and how TF32 behaved there.
    info = dataclasses.replace(describe_runtime(), device_name="Dev <X>")
    html = info._repr_html_()
    summary = html.split("<summary", 1)[1].split("</summary>", 1)[0]
    assert "Dev &lt;X&gt;" in summary and html_module.escape(info.tf32_label) in summary
    assert "<details" in html and " open" not in html.split(">", 1)[0]


def test_html_escapes_device_name():
    info = dataclasses.replace(describe_runtime(), device_name="<script>x</script>")
    assert "<script>" not in info._repr_html_()


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, ("chapter", "reduced for a small CPU")),
        ("chapter", ("chapter", "reduced for a small CPU")),
        (" FULL ", ("full", "full (EIGPREC_SCALE=full)")),
        (
            "quick",
            ("quick", "one seed, smaller grids: make test's Colab check (EIGPREC_SCALE=quick)"),
        ),
    ],
)
def test_one_variable_sets_the_scale_and_the_box_says_it(monkeypatch, value, expected):
    from eigprec_book.helpers import provenance, scale

    monkeypatch.delenv("EIGPREC_SCALE", raising=False)
    if value is not None:
        monkeypatch.setenv("EIGPREC_SCALE", value)
    assert scale() == expected[0]
    assert full_scale() is (expected[0] == "full") and quick_scale() is (expected[0] == "quick")
    assert dict(provenance()._rows())["Scale"] == expected[1]
    assert "Scale" not in dict(describe_runtime()._rows())  # the library knows no scale


@pytest.mark.parametrize(
    ("name", "value", "match"),
    [
        ("EIGPREC_SCALE", "huge", "must be one of"),
        ("EIGPREC_FULL", "1", "EIGPREC_FULL is no longer read"),
        ("EIGPREC_QUICK", "1", "EIGPREC_QUICK is no longer read"),
    ],
)
def test_a_scale_it_cannot_honour_is_refused_by_name(monkeypatch, name, value, match):
    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=match):
        full_scale()


def test_notes_must_be_pairs_of_strings():
    with pytest.raises(TypeError, match="notes"):
        describe_runtime(notes=(("Scale",),))
    assert dict(describe_runtime(notes=(("Scale", "x"),))._rows())["Scale"] == "x"


def test_full_scale_is_a_book_helper_not_library():
    assert "full_scale" not in eigprec.__all__
    assert not hasattr(eigprec, "full_scale")
    assert full_scale.__module__ == "eigprec_book.helpers.scale"
    assert "quick_scale" not in eigprec.__all__
    assert quick_scale.__module__ == "eigprec_book.helpers.scale"


def _fake_cuda(monkeypatch, name: str, capability: tuple[int, int], hip: str | None = None):
    """Pretend a CUDA device is visible (this machine has none)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=None: name)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index=None: capability)
    monkeypatch.setattr(torch.version, "hip", hip)


def test_colab_t4_has_no_tf32_and_is_emulated(monkeypatch):
    # Colab's free GPU: a Turing T4, compute capability 7.5, no TF32 tensor cores.
    _fake_cuda(monkeypatch, "Tesla T4", (7, 5))
    info = describe_runtime()
    assert info.device == "cuda"
    assert info.compute_capability == (7, 5)
    assert info.tf32_hardware is False
    assert info.tf32_emulated is True
    assert info.tf32_label.startswith("emulated in software (this GPU has no TF32; ties rounded")
    assert "Tesla T4 (compute capability 7.5)" in str(info)
    assert "this GPU has no TF32" in info._repr_html_()


def test_a_cuda_build_without_a_gpu_still_describes_itself(monkeypatch):
    # PyPI's Linux torch is a CUDA build; on a machine without a GPU its cuDNN query raises
    # (torch 2.13: "min() iterable argument is empty" in torch/backends/cudnn). The box
    # must still be drawn, with cuDNN's version unknown.
    _fake_cuda(monkeypatch, "Tesla T4", (7, 5))

    def no_cudnn():
        raise ValueError("min() iterable argument is empty")

    monkeypatch.setattr(torch.backends.cudnn, "version", no_cudnn)
    info = describe_runtime()
    assert info.device == "cuda" and info.cudnn_version is None


def test_ampere_has_tf32(monkeypatch):
    _fake_cuda(monkeypatch, "NVIDIA A100-SXM4-80GB", (8, 0))
    info = describe_runtime()
    assert info.tf32_hardware is True and info.tf32_emulated is False
    assert info.tf32_label == "real (tensor cores)"


def test_rocm_device_is_emulated(monkeypatch):
    # ROCm builds answer torch.cuda too; TF32 tensor cores are NVIDIA's.
    _fake_cuda(monkeypatch, "AMD Instinct MI300X", (9, 4), hip="6.2")
    assert describe_runtime().tf32_emulated is True


def test_importing_the_package_does_not_import_cupy():
    import subprocess

    code = "import sys, eigprec; sys.exit('cupy' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


_TF32_VARS = ("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE", "NVIDIA_TF32_OVERRIDE")


def test_no_tf32_environment_row_when_unset(monkeypatch):
    for name in _TF32_VARS:
        monkeypatch.delenv(name, raising=False)
    info = describe_runtime()
    assert info.tf32_env_overrides == ()
    assert "TF32 environment" not in str(info)
    assert "TF32 environment" not in info._repr_html_()


def test_reports_cublas_override(monkeypatch):
    monkeypatch.delenv("NVIDIA_TF32_OVERRIDE", raising=False)
    monkeypatch.setenv("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE", "1")
    info = describe_runtime()
    assert info.tf32_env_overrides == (("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE", "1"),)
    for rendered in (str(info), info._repr_html_()):
        assert "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1" in rendered
        assert "starts at" in rendered


def test_reports_nvidia_override_and_its_effect_on_real_tf32(monkeypatch):
    monkeypatch.setenv("NVIDIA_TF32_OVERRIDE", "0")
    monkeypatch.setenv("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE", "0")
    _fake_cuda(monkeypatch, "NVIDIA A100-SXM4-80GB", (8, 0))
    info = describe_runtime()
    assert dict(info.tf32_env_overrides) == {
        "NVIDIA_TF32_OVERRIDE": "0",
        "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE": "0",
    }
    assert info.tf32_label.startswith("off (NVIDIA_TF32_OVERRIDE=0")
    text = str(info)
    assert "NVIDIA_TF32_OVERRIDE=0 (cuBLAS and cuDNN never use TF32)" in text
    assert "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=0" in text
    assert "NVIDIA_TF32_OVERRIDE=0" in info._repr_html_()


# NVIDIA documents only NVIDIA_TF32_OVERRIDE=0; its libraries are closed. Decided: the value
# is read as C reads an integer (strtol: leading white space and a sign skipped, digits up to
# the first other character), so " 0 ", "00" and "+0" are 0. A value with no digits is
# not claimed either way. The label and the table row follow that one reading.
@pytest.mark.parametrize(
    ("value", "off"),
    [
        ("0", True),
        (" 0 ", True),
        ("\t0\n", True),
        ("00", True),
        ("+0", True),
        ("-0", True),
        ("0abc", True),
        ("1", False),
        (" 1", False),
        ("2", False),
        ("-1", False),
        ("", None),
        ("off", None),
        (" ", None),
    ],
)
def test_nvidia_override_label_and_table_agree(monkeypatch, value, off):
    monkeypatch.setenv("NVIDIA_TF32_OVERRIDE", value)
    monkeypatch.delenv("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE", raising=False)
    _fake_cuda(monkeypatch, "NVIDIA H200", (9, 0))
    info = describe_runtime()
    row = dict(info._rows())["TF32 environment"]
    if off is True:
        assert info.tf32_label.startswith("off (NVIDIA_TF32_OVERRIDE")
        assert "never use TF32" in row
    elif off is False:
        assert info.tf32_label == "real (tensor cores)"
        assert "never use TF32" not in row and "not 0" in row
    else:
        assert info.tf32_label.startswith("real (tensor cores")
        assert "not an integer" in info.tf32_label and "not an integer" in row
        assert "never use TF32" not in row
    assert info.as_record()["tf32"] == info.tf32_label


@pytest.mark.parametrize(("value", "read"), [("1", True), (" 1 ", False), ("01", False)])
def test_torch_cublas_override_is_explained_as_torch_reads_it(monkeypatch, value, read):
    # torch's c10::utils::check_env takes exactly "0" or "1" and warns about the rest
    # (checked with torch 2.13: " 1 " and "01" leave the precision at 'highest').
    monkeypatch.setenv("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE", value)
    monkeypatch.delenv("NVIDIA_TF32_OVERRIDE", raising=False)
    row = dict(describe_runtime()._rows())["TF32 environment"]
    assert ("starts at 'high'" in row) is read
    assert ("ignored by torch" in row) is not read


def test_reports_the_precision_that_runs_after_mixed_api_use():
    saved = torch.backends.cuda.matmul.fp32_precision
    try:
        torch.backends.cuda.matmul.fp32_precision = "tf32"
        with matmul_precision("medium"):
            pass
        assert describe_runtime().matmul_precision == "high"
    finally:
        torch.set_float32_matmul_precision("highest")
        torch.backends.cuda.matmul.fp32_precision = saved
        torch.backends.mkldnn.matmul.fp32_precision = "none"


# -- time_side_by_side: its warm-up and its device (issue 35, item 12) -----------------------


def _counting(monkeypatch):
    """Candidates that log each call as timed or not, with the CPU clock patched to mark it."""
    import eigprec.timing as timing

    log: dict[str, list[bool]] = {"a": [], "b": []}
    timing_now = {"on": False}

    def clock(fn):
        timing_now["on"] = True
        try:
            fn()
        finally:
            timing_now["on"] = False
        return 1e-3

    monkeypatch.setattr(timing, "perf_counter_clock", clock)
    fns = {name: (lambda name=name: log[name].append(timing_now["on"])) for name in log}
    return fns, log


@pytest.mark.parametrize("warmup", [0, 1, 3])
def test_time_side_by_side_makes_exactly_warmup_untimed_calls(monkeypatch, warmup):
    # Before: one more untimed "sizing" call per candidate than `warmup` asked for.
    fns, log = _counting(monkeypatch)
    eigprec.time_side_by_side(fns, repeats=4, warmup=warmup)
    for calls in log.values():
        assert calls == [False] * warmup + [True] * 4


@pytest.mark.parametrize("device", ["cuda", "cuda:0", torch.device("cuda")])
def test_time_side_by_side_on_cuda_without_cuda_fails_before_any_call(monkeypatch, device):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    fns, log = _counting(monkeypatch)
    with pytest.raises(ValueError, match=r"CUDA is not available"):
        eigprec.time_side_by_side(fns, repeats=2, warmup=3, device=device)
    assert log == {"a": [], "b": []}


def test_time_side_by_side_on_a_missing_cuda_index_fails_before_any_call(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    fns, log = _counting(monkeypatch)
    with pytest.raises(ValueError, match=r"cuda:1.*1 CUDA device"):
        eigprec.time_side_by_side(fns, device="cuda:1")
    assert log == {"a": [], "b": []}


@pytest.mark.parametrize(
    ("device", "error"), [(3, TypeError), (None, TypeError), ("gpu", ValueError)]
)
def test_time_side_by_side_refuses_what_is_not_a_device(monkeypatch, device, error):
    fns, log = _counting(monkeypatch)
    with pytest.raises(error, match="device"):
        eigprec.time_side_by_side(fns, device=device)
    assert log == {"a": [], "b": []}


def test_the_tf32_label_names_the_emulators_rounding_rule(monkeypatch):
    # Claims about TF32 can depend on its tie rule (issue 32): the provenance box says which.
    monkeypatch.setenv("EIGPREC_TF32_ROUNDING", "rne")
    info = eigprec.describe_runtime()
    if info.tf32_hardware:
        pytest.skip("TF32 is real here: the GPU's own rounding applies")
    assert info.tf32_rounding == "rne"
    assert "ties rounded to even" in info.tf32_label
    assert "as the H100 and H200 recorded for the book" in info.tf32_label
    monkeypatch.delenv("EIGPREC_TF32_ROUNDING")
    label = eigprec.describe_runtime().tf32_label
    # ties away is what the published Ampere observations show, not what the book's own
    # Hopper records show (issue 52, item 2): the box says both
    assert "ties rounded away from zero" in label
    assert "published for Ampere" in label and "H100 and H200 round ties to even" in label
