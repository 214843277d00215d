"""``python -m eigprec.audit`` on the shapes of real training scripts (issue 48).

Whole iterations under ``--steps``, ``--max-seconds``, SIGTERM, report files that fail or
collide, errors and warnings at the user's line, the command line's smaller promises. The
command runs in this process (``main``) on small scripts written into ``tmp_path``; only the
signal check starts a process of its own.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

from eigprec.audit.cli import main

from .conftest import ROOT


def _audit(tmp_path, capsys, source: str, *options: str, args: tuple[str, ...] = ()):
    """(exit status, stdout, stderr, JSON) of ``python -m eigprec.audit OPTIONS train.py ARGS``."""
    script = tmp_path / "train.py"
    script.write_text(source, encoding="utf-8")
    report = tmp_path / "audit.json"
    try:
        status = main([*options, "--json", str(report), str(script), *args])
    except SystemExit as exit_:
        status = exit_.code
    out = capsys.readouterr()
    return status, out.out, out.err, json.loads(report.read_text(encoding="utf-8"))


LOOP = """\
import json, sys, torch
torch.manual_seed(0)
model = torch.nn.Linear(4, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
sched = torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.5)
x = torch.randn(8, 4)
for it in range(10):
    opt.zero_grad()
    model(x).square().sum().backward()
    opt.step()
    sched.step()
    print("iter", it, "lr", sched.get_last_lr()[0])
    with open(sys.argv[1], "w") as f:
        json.dump({"it": it, "lr": sched.get_last_lr()[0]}, f)
"""


def test_steps_runs_whole_iterations_with_their_logging_scheduler_and_checkpoint(tmp_path, capsys):
    checkpoint = tmp_path / "ckpt.json"
    status, out, err, found = _audit(
        tmp_path, capsys, LOOP, "--steps", "3", args=(str(checkpoint),)
    )
    assert status == 0, err
    assert out.splitlines() == ["iter 0 lr 0.05", "iter 1 lr 0.025", "iter 2 lr 0.0125"]
    assert json.loads(checkpoint.read_text()) == {"it": 2, "lr": 0.0125}
    assert "stopped at the start of iteration 4 (--steps 3: 3 whole iterations of SGD)" in err
    assert found["optimizer_steps"] == found["iterations"] == 3 and found["stopped_by_steps"]
    assert found["stopped_by"] == "--steps" and found["stops_caught_by_script"] == 0
    # the fourth iteration's forward and backward ran before its step was refused
    forward = [r for r in found["records"] if r["phase"] == "forward"]
    assert [r["calls"] for r in forward] == [4]


GAN = """\
import torch
torch.manual_seed(0)
g, d = torch.nn.Linear(2, 2), torch.nn.Linear(2, 1)
opt_d = torch.optim.Adam(d.parameters(), lr=0.1)
opt_g = torch.optim.SGD(g.parameters(), lr=0.1)
z = torch.randn(4, 2)
for it in range(5):
    opt_d.zero_grad(); d(g(z).detach()).mean().backward(); opt_d.step()
    print("d", it)
    opt_g.zero_grad(); (-d(g(z)).mean()).backward(); opt_g.step()
    print("g", it)
"""


def test_steps_counts_iterations_of_the_first_optimizer_that_steps(tmp_path, capsys):
    status, out, err, found = _audit(tmp_path, capsys, GAN, "--steps", "2")
    assert status == 0, err
    assert out.split() == ["d", "0", "g", "0", "d", "1", "g", "1"]
    assert found["iterations"] == 2 and found["optimizer_steps"] == 4
    assert found["first_optimizer"] == "Adam"


BARE_EXCEPT = """\
import torch
model = torch.nn.Linear(4, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.ones(8, 4)
for it in range(6):
    try:
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()
        print("step", it)
    except:
        print("caught")
"""


def test_a_stop_the_script_swallows_is_refused_again_and_reported(tmp_path, capsys):
    status, out, err, found = _audit(tmp_path, capsys, BARE_EXCEPT, "--steps", "2")
    assert status == 0, err
    assert out.split("\n")[:-1] == ["step 0", "step 1", *["caught"] * 4]
    assert "stopped" not in err.splitlines()[1]  # the header: the script ended by itself
    assert "Note: the script caught the audit's stop (--steps) 4 time(s) and went on" in err
    assert found["iterations"] == 2 and found["stops_caught_by_script"] == 4
    assert found["stopped_by"] is None


BY_HAND = """\
import torch
torch.manual_seed(0)
w = torch.randn(4, 2, requires_grad=True)
x = torch.randn(8, 4)
for it in range(3):
    (x @ w).square().sum().backward()
    with torch.no_grad():
        w -= 0.01 * w.grad
    w.grad = None
    print("it", it)
"""


def test_steps_without_an_optimizer_says_it_never_fired(tmp_path, capsys):
    status, out, err, found = _audit(tmp_path, capsys, BY_HAND, "--steps", "2")
    assert status == 0 and out.split() == ["it", "0", "it", "1", "it", "2"]
    assert "Note: --steps 2 never fired: no torch.optim optimizer stepped" in err
    assert "--max-seconds stops any script" in err
    assert found["optimizer_steps"] == 0 and found["stopped_by"] is None


FOREVER_BY_HAND = """\
import time, torch
a = torch.randn(4, 4)
while True:
    a @ a
    time.sleep(0.01)
"""

FOREVER_WITH_OPTIMIZER = """\
import time, torch
model = torch.nn.Linear(4, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
it = 0
while True:
    opt.zero_grad()
    model(torch.ones(3, 4)).sum().backward()
    time.sleep(0.02)
    opt.step()
    print("done", it)
    it += 1
"""


def test_max_seconds_stops_a_script_without_an_optimizer(tmp_path, capsys):
    start = time.monotonic()
    status, _, err, found = _audit(tmp_path, capsys, FOREVER_BY_HAND, "--max-seconds", "0.3")
    assert status == 0 and time.monotonic() - start < 30
    assert "stopped by --max-seconds 0.3" in err and found["stopped_by"] == "--max-seconds"
    assert found["records"][0]["calls"] >= 1


def test_max_seconds_with_an_optimizer_ends_at_an_iteration_start(tmp_path, capsys):
    status, out, err, found = _audit(
        tmp_path, capsys, FOREVER_WITH_OPTIMIZER, "--max-seconds", "0.3"
    )
    assert status == 0, err
    iterations = found["iterations"]
    assert iterations >= 1 and out.splitlines()[-1] == f"done {iterations - 1}"
    assert f"stopped by --max-seconds 0.3 at the start of iteration {iterations + 1}" in err


SLEEPER = """\
import sys, time, torch
a = torch.randn(8, 8)
a @ a
print("ready", flush=True)
while True:
    a @ a
    time.sleep(0.01)
"""


def test_sigterm_ends_the_script_and_leaves_the_reports(tmp_path):
    script = tmp_path / "sleeper.py"
    script.write_text(SLEEPER, encoding="utf-8")
    report, table = tmp_path / "audit.json", tmp_path / "audit.md"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "eigprec.audit", "--json", str(report)]
    command += ["--markdown", str(table), str(script)]
    child = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout.readline() == "ready\n"
        child.send_signal(signal.SIGTERM)
        _, err = child.communicate(timeout=120)
    finally:
        child.kill()
    assert child.returncode == 143, err
    assert "ended by SIGTERM (exit status 143)" in err and "Traceback" not in err
    found = json.loads(report.read_text(encoding="utf-8"))
    assert found["exit_status"] == 143 and found["records"][0]["calls"] >= 1
    assert "ended by SIGTERM" in table.read_text(encoding="utf-8")


EXITS_3 = """\
import sys, torch
torch.ones(2, 3) @ torch.ones(3, 2)
sys.exit(3)
"""


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs Linux's /dev/full")
def test_a_report_that_cannot_be_written_loses_neither_the_others_nor_the_status(tmp_path, capsys):
    script = tmp_path / "s.py"
    script.write_text(EXITS_3, encoding="utf-8")
    good = tmp_path / "good.json"
    with pytest.raises(SystemExit) as exit_:
        main(["--markdown", "/dev/full", "--json", str(good), str(script)])
    assert exit_.value.code == 3
    err = capsys.readouterr().err
    assert "could not write --markdown /dev/full: [Errno 28]" in err and "Traceback" not in err
    assert json.loads(good.read_text(encoding="utf-8"))["exit_status"] == 3


CHDIR = """\
import os, torch
os.chdir("sub")
torch.ones(2, 2) @ torch.ones(2, 2)
"""


def test_relative_report_paths_are_fixed_before_the_script_changes_folder(
    tmp_path, capsys, monkeypatch
):
    (tmp_path / "sub").mkdir()
    (tmp_path / "s.py").write_text(CHDIR, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    assert main(["--json", "out.json", "--markdown", "out.md", "s.py"]) == 0
    assert (tmp_path / "out.json").is_file() and (tmp_path / "out.md").is_file()
    assert not (tmp_path / "sub" / "out.json").exists()
    capsys.readouterr()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--json", "{script}"], "--json {script}: that is the script itself"),
        (["--markdown", "{tmp}/x/../s.py"], "that is the script itself"),
        (
            ["--json", "{tmp}/a", "--markdown", "{tmp}/a"],
            "--markdown {tmp}/a: the same file as --json",
        ),
    ],
)
def test_outputs_that_are_the_script_or_each_other_are_refused(tmp_path, capsys, options, message):
    script = tmp_path / "s.py"
    script.write_text("print('ran')\n", encoding="utf-8")
    (tmp_path / "x").mkdir()
    fill = {"{script}": str(script), "{tmp}": str(tmp_path)}
    for key, value in fill.items():
        options = [o.replace(key, value) for o in options]
        message = message.replace(key, value)
    with pytest.raises(SystemExit) as exit_:
        main([*options, str(script)])
    out = capsys.readouterr()
    assert exit_.value.code == 2 and message in out.err and "ran" not in out.out
    assert script.read_text(encoding="utf-8") == "print('ran')\n"


# --- errors and warnings at the user's line ------------------------------------------------

ERRORS = """\
import sys
import torch
import torch.nn.functional as F


def product():
    return torch.ones(3, 4) @ torch.ones(5, 6)


def layer():
    return torch.nn.Linear(3, 4)(torch.ones(2, 5))


def softmax():
    return F.softmax(torch.ones(2, 3), dim=5)


def own():
    raise ValueError("boom")


{"product": product, "layer": layer, "softmax": softmax, "own": own}[sys.argv[1]]()
"""

_FRAME = re.compile(r'^  File "(.*)", line (\d+), in (.*)$', re.M)


@pytest.mark.parametrize(
    ("case", "frames", "last"),
    [
        ("product", [("train.py", "<module>"), ("train.py", "product")], "RuntimeError: mat1"),
        (
            "softmax",
            [("train.py", "<module>"), ("train.py", "softmax"), ("functional.py", "softmax")],
            "IndexError: Dimension out of range",
        ),
        ("own", [("train.py", "<module>"), ("train.py", "own")], "ValueError: boom"),
        ("layer", None, "RuntimeError: mat1 and mat2 shapes cannot be multiplied (2x5 and 3x4)"),
    ],
)
def test_a_torch_error_shows_the_users_frames_not_the_audits(tmp_path, capsys, case, frames, last):
    status, _, err, found = _audit(tmp_path, capsys, ERRORS, args=(case,))
    assert status == 1 and found["exception"].startswith(last.split(":")[0])
    traceback = err[: err.index("\nTF32 audit of")]
    shown = [(Path(f).name, name) for f, _, name in _FRAME.findall(traceback)]
    assert not [f for f, _, _ in _FRAME.findall(traceback) if "eigprec" in f]
    assert not {"overrides.py", "_ops.py", "eval_frame.py", "_compile.py"} & {f for f, _ in shown}
    if frames is not None:
        assert shown == frames
    else:  # nn.Module's call machinery, then the layer's forward: no frame of the audit's
        assert shown[:2] == [("train.py", "<module>"), ("train.py", "layer")]
        assert shown[-1] == ("linear.py", "forward")
    assert traceback.strip().splitlines()[-1].startswith(last)


WARNS = """\
import torch
import torch.nn.functional as F
x = torch.ones(2, 3, requires_grad=True)
F.softmax(x)
torch.ones(3).T
torch.ones(2, 2) @ torch.ones(2, 2)
"""


def test_warnings_raised_inside_torch_point_at_the_users_line(tmp_path, capsys):
    script = tmp_path / "w.py"
    script.write_text(WARNS, encoding="utf-8")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert main([str(script)]) == 0
    capsys.readouterr()
    places = [(Path(w.filename).name, w.lineno) for w in caught]
    assert ("w.py", 4) in places and ("w.py", 5) in places, places
    assert not [w for w in caught if "eigprec" in w.filename]


# --- the smaller promises -----------------------------------------------------------------

ARGV = "import sys\nprint(sys.argv[1:])\n"


def test_the_scripts_arguments_pass_as_typed_a_leading_double_dash_included(tmp_path, capsys):
    script = tmp_path / "argv.py"
    script.write_text(ARGV, encoding="utf-8")
    assert main([str(script), "--", "a", "--steps", "3"]) == 0
    assert main(["--top", "3", "--", str(script), "-x"]) == 0
    assert capsys.readouterr().out.splitlines() == ["['--', 'a', '--steps', '3']", "['-x']"]


def test_a_missing_target_is_the_only_required_argument(capsys):
    with pytest.raises(SystemExit):
        main(["--steps", "2"])
    err = capsys.readouterr().err
    assert err.rstrip().endswith("the following arguments are required: script.py | module")


DEEP = """\
import torch


def helper():
    return torch.ones(2, 2) @ torch.ones(2, 2)


helper()
"""


def test_deep_sites_name_only_the_scripts_frames(tmp_path, capsys):
    _, _, _, found = _audit(tmp_path, capsys, DEEP, "--depth", "4")
    (record,) = found["records"]
    assert [(Path(f).name, line, fn) for f, line, fn in record["frames"]] == [
        ("train.py", 5, "helper"),
        ("train.py", 8, "<module>"),
    ]


ROUND_ME = """\
import torch
torch.set_float32_matmul_precision("high")
a = torch.tensor([[1 + 2**-11, 1 + 3 * 2**-11]])
print((a @ torch.ones(2, 1)).item())
"""


def test_the_rounding_named_in_the_environment_is_the_audits_default(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("EIGPREC_TF32_ROUNDING", "rne")
    status, out, _, found = _audit(tmp_path, capsys, ROUND_ME, "--emulate")
    # ties to even: 1 + 2**-11 rounds down, 1 + 3 * 2**-11 up (rna would round both up)
    assert status == 0 and float(out) == 1.0 + 1 + 2**-9
    assert found["options"]["rounding"] == "rne"
    monkeypatch.setenv("EIGPREC_TF32_ROUNDING", "nearest")
    with pytest.raises(SystemExit):
        main([str(tmp_path / "train.py")])
    assert "EIGPREC_TF32_ROUNDING: " in capsys.readouterr().err


# Two products under 'high': a two-row one, which a Hopper GPU rounds, and a one-row one,
# which it keeps in float32 (eigprec.tf32.gpus). 1 + 2**-11 and 1 + 3 * 2**-11 are TF32 ties.
GPU_SCRIPT = """\
import torch
torch.set_float32_matmul_precision("high")
col = torch.tensor([[1 + 2**-11], [1 + 3 * 2**-11]])
print((col @ torch.ones(1, 1)).flatten().tolist())
print((torch.ones(1, 2) @ col).item())
"""


def test_gpu_models_that_gpus_tie_rule_and_what_it_keeps_in_float32(tmp_path, capsys):
    status, out, err, found = _audit(tmp_path, capsys, GPU_SCRIPT, "--emulate", "--gpu", "hopper")
    rows, row = out.splitlines()
    # ties to even in the two-row product (rna would give 1 + 2**-10 first); the one-row
    # product stays float32 under the emulator and is left out of the audit
    assert status == 0 and json.loads(rows) == [1.0, 1 + 2**-9]
    assert float(row) == 2 + 4 * 2**-11
    assert found["options"]["gpu"] == "hopper" and found["options"]["rounding"] == "rne"
    assert [(r["op"], r["shapes"][0]) for r in found["records"]] == [("mm", [2, 1])]
    line = next(s for s in found["summary"] if s.startswith("GPU modelled: hopper"))
    assert line in err and "ties to even" in line and "one-row mm" in line
    # an explicit --rounding wins over the GPU's rule, as in tf32_audit(gpu=...)
    status, out, err, found = _audit(
        tmp_path, capsys, GPU_SCRIPT, "--emulate", "--gpu", "hopper", "--rounding", "rna"
    )
    assert json.loads(out.splitlines()[0]) == [1 + 2**-10, 1 + 2**-9]
    assert found["options"]["rounding"] == "rna" and "GPU modelled: hopper" in err


def test_gpu_ampere_rounds_ties_away_and_keeps_no_product_in_float32(tmp_path, capsys, monkeypatch):
    # the GPU's rule beats the environment's default, as in tf32_audit(gpu=...)
    monkeypatch.setenv("EIGPREC_TF32_ROUNDING", "rne")
    status, out, err, found = _audit(tmp_path, capsys, GPU_SCRIPT, "--emulate", "--gpu", "ampere")
    assert status == 0 and json.loads(out.splitlines()[0]) == [1 + 2**-10, 1 + 2**-9]
    assert found["options"] == {**found["options"], "gpu": "ampere", "rounding": "rna"}
    assert len(found["records"]) == 2 and "GPU modelled: ampere" in err
    _, _, err, found = _audit(tmp_path, capsys, GPU_SCRIPT)
    assert found["options"]["gpu"] is None and "GPU modelled" not in err


def test_gpu_reaches_tf32_audit_and_the_emulator(tmp_path, capsys, monkeypatch):
    import eigprec.audit.cli as cli

    seen = []
    for name in ("tf32_audit", "emulate_tf32"):
        real = getattr(cli, name)

        def spy(*args, _real=real, _name=name, **kwargs):
            seen.append((_name, kwargs.get("gpu")))
            return _real(*args, **kwargs)

        monkeypatch.setattr(cli, name, spy)
    _audit(tmp_path, capsys, GPU_SCRIPT, "--emulate", "--gpu", "hopper")
    assert sorted(seen) == [("emulate_tf32", "hopper"), ("tf32_audit", "hopper")]


NEVER_TF32 = "import torch\nprint((torch.ones(2, 2) @ torch.ones(2, 2)).sum().item())\n"


def test_emulate_in_a_script_that_never_asks_for_tf32_says_it_changed_nothing(tmp_path, capsys):
    status, _, err, found = _audit(tmp_path, capsys, NEVER_TF32, "--emulate")
    assert status == 0
    note = "Note: --emulate changed nothing: the script never asks for TF32; add --precision high"
    assert note in err and any(n.startswith(note) for n in found["notes"])
    _, _, err, found = _audit(tmp_path, capsys, NEVER_TF32, "--emulate", "--precision", "high")
    assert "--emulate changed nothing" not in err and found["records"][0]["tf32_calls"] == 1
    assert "TF32: the script turns it on for all 1 calls" in err


def test_help_says_what_is_normal_what_to_do_and_every_exit_status(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert exit_.value.code == 0
    for words in (
        "How to read it: ordinary TF32 rounding gives a norm-wise error of about 2**-12",
        "never more than 2**-10",
        "cancellation >=Nx above it",
        'with eigprec.matmul_precision("highest"):',
        "3xTF32 (eigprec.matmul_3xtf32)",
        "by Ctrl-C (130), by SIGTERM (143)",
        "--unfuse",
        "--max-seconds S",
        "--gpu {ampere,hopper}",
        "hopper rne",
    ):
        assert words in text, words


COMPILED = """\
import torch
model = torch.nn.Linear(4, 4)
fast = torch.compile(model)
print(fast(torch.ones(2, 4)).shape)
"""


def test_torch_compile_runs_eagerly_under_the_audit_and_the_report_says_so(tmp_path, capsys):
    status, out, err, found = _audit(tmp_path, capsys, COMPILED)
    assert status == 0 and out == "torch.Size([2, 4])\n"
    assert "Note: torch.compile was called 1 time(s) (train.py:3); under the audit" in err
    assert found["torch_compile_calls"] == ["train.py:3"]
    (record,) = found["records"]  # the compiled module's product, audited as eager code
    assert record["site"] == "train.py:4" and "global hooks" not in err


def test_the_cli_module_is_importable_without_dynamo():
    # `import eigprec.audit` (and the first audited product) must not pull in torch._dynamo
    # through the rest of the library: it costs seconds of start-up.
    code = (
        "import sys, torch\n"
        "import eigprec.audit.cli\n"
        "with eigprec.audit.tf32_audit():\n"
        "    torch.ones(2, 2) @ torch.ones(2, 2)\n"
        "print(sorted(m for m in sys.modules if m.startswith(('torch._dynamo', 'eigprec.eig'))))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert done.stdout == "[]\n", done.stderr
