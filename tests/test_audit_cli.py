"""``python -m eigprec.audit``: an unmodified script runs as ``python`` runs it, and is audited.

Each check starts a Python process (about 3 s for importing torch), so the checks are few and
each compares a whole run: the audited one against ``python script.py`` itself where the two
must agree (output, traceback, exit status).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eigprec.audit.cli import main

from .conftest import ROOT

EXAMPLE = ROOT / "tests" / "data" / "mnist_example.py"
AUDIT = [sys.executable, "-m", "eigprec.audit"]


def _run(command: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False
    )


def _strict_json(path: Path) -> dict:
    def refuse(name: str) -> None:
        raise ValueError(f"not JSON: {name}")

    return json.loads(path.read_text(encoding="utf-8"), parse_constant=refuse)


def _table_rows(stderr: str) -> list[str]:
    lines = stderr.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("site "))
    return [line for line in lines[start + 1 :] if ".py:" in line.split()[0]]


def test_a_training_script_nobody_here_wrote_keeps_its_output_and_gets_a_report(tmp_path):
    # PyTorch's MNIST example on random images: 64 images in batches of 16 = 4 optimizer
    # steps, then two test batches of the same size under no_grad.
    args = ["--epochs", "1", "--train-size", "64", "--test-size", "32"]
    args += ["--batch-size", "16", "--test-batch-size", "16", "--log-interval", "1"]
    plain = _run([sys.executable, str(EXAMPLE), *args])
    js, md = tmp_path / "audit.json", tmp_path / "audit.md"
    audited = _run(
        [*AUDIT, "--json", str(js), "--markdown", str(md), "--top", "3", str(EXAMPLE), *args]
    )
    assert plain.returncode == 0 and audited.returncode == 0, audited.stderr
    assert audited.stdout == plain.stdout  # same losses, bit for bit, and same lines
    assert plain.stdout.count("Train Epoch") == 4 and "Test set" in plain.stdout

    found = _strict_json(js)
    records = found["records"]
    header = f"TF32 audit of {EXAMPLE}: {len(records)} product sites, 4 optimizer steps"
    assert header in audited.stderr
    rows = _table_rows(audited.stderr)
    assert len(rows) == 3 and f"({len(records) - 3} more sites" in audited.stderr
    assert found["optimizer_steps"] == 4 and found["exit_status"] == 0
    assert not found["stopped_by_steps"] and found["exception"] is None
    assert all(Path(r["frames"][0][0]).name == EXAMPLE.name for r in records)
    norms = [r["norm_error"] for r in records]
    assert norms == sorted(norms, reverse=True) and all(0 < e < 1e-3 for e in norms)
    # fc1's forward product: 4 training batches and 2 test batches (under no_grad)
    (fc1,) = [r for r in records if r["module"] == "fc1" and r["phase"] == "forward"]
    assert fc1["op"] == "addmm" and fc1["calls"] == 6
    assert {r["module"] for r in records} == {"conv1", "conv2", "fc1", "fc2"}

    text = md.read_text(encoding="utf-8").splitlines()
    assert text[0] == "## TF32 audit of `mnist_example.py`" and header in text[2]
    table = [line for line in text if line.startswith("|")]
    assert table[0].startswith("| site | op | shapes | calls |") and len(table) == 2 + 3


SCRIPT = """\
import sys
import torch

print(sys.argv, __name__, __file__, sys.path[0])
print(torch.get_float32_matmul_precision())
a = torch.tensor([[1 + 2**-11]])
print((a @ a).item())  # line 7


def fail():
    raise ValueError("boom")


fail()
print("not reached")
"""


def test_a_script_that_raises_keeps_its_traceback_and_status_and_gets_its_report(tmp_path):
    (tmp_path / "sub").mkdir()
    script = tmp_path / "sub" / "script.py"
    script.write_text(SCRIPT, encoding="utf-8")
    argv = ["sub/script.py", "a", "--steps", "5"]  # the script's own --steps: not the audit's
    plain = _run([sys.executable, *argv], cwd=tmp_path)
    audited = _run([*AUDIT, "--emulate", "--precision", "high", *argv], cwd=tmp_path)
    assert plain.returncode == audited.returncode == 1
    expected = [f"{argv} __main__ {script} {script.parent}", "highest", str((1 + 2**-11) ** 2)]
    assert plain.stdout.splitlines() == expected
    # --emulate --precision high: the run itself rounds its operands as a TF32 GPU does
    tf32 = (1 + 2**-10) ** 2
    assert audited.stdout.splitlines() == [expected[0], "high", str(tf32)]
    # python's traceback, unchanged, then the report
    assert plain.stderr.startswith("Traceback") and plain.stderr.endswith("ValueError: boom\n")
    assert audited.stderr.startswith(plain.stderr)
    report = audited.stderr[len(plain.stderr) :]
    assert "1 product sites, 0 optimizer steps; the script raised ValueError (exit status 1)" in (
        report
    )
    (row,) = _table_rows(report)
    assert row.startswith("script.py:7 ") and " mm " in row


MODULE = """\
import os
import sys
import torch

print(sys.argv[1:], os.path.basename(sys.argv[0]), __name__, sys.path[0] == os.getcwd())
torch.ones(2, 3) @ torch.ones(3, 2)
sys.exit(3)
"""


def test_a_module_runs_as_python_m_runs_it_and_its_exit_status_passes(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("", encoding="utf-8")
    (tmp_path / "pkg" / "train.py").write_text(MODULE, encoding="utf-8")
    js = tmp_path / "out.json"
    audited = _run([*AUDIT, "--json", str(js), "-m", "pkg.train", "x", "--top", "7"], tmp_path)
    assert audited.returncode == 3, audited.stderr
    assert audited.stdout == "['x', '--top', '7'] train.py __main__ True\n"
    assert "the script exited with status 3" in audited.stderr
    found = _strict_json(js)
    assert found["exit_status"] == 3 and found["module"] and found["args"] == ["x", "--top", "7"]
    (record,) = found["records"]
    assert record["site"] == "train.py:6" and record["norm_error"] == 0.0  # ones are exact


FOREVER = """\
import torch

model = torch.nn.Linear(4, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(8, 4)
step = 0
try:
    while True:
        opt.zero_grad()
        model(x).square().sum().backward()
        opt.step()
        step += 1
        print("step", step)
except Exception:
    print("caught by the script")
finally:
    print("finally ran")
print("after the loop")
"""


def test_steps_stop_a_loop_that_would_run_forever(tmp_path):
    script = tmp_path / "forever.py"
    script.write_text(FOREVER, encoding="utf-8")
    js = tmp_path / "out.json"
    audited = _run([*AUDIT, "--steps", "3", "--json", str(js), str(script)])
    assert audited.returncode == 0, audited.stderr
    # three whole iterations, then the fourth step ends the script: its finally block runs,
    # its except clause does not
    assert audited.stdout.splitlines() == ["step 1", "step 2", "step 3", "finally ran"]
    assert "stopped at the start of iteration 4 (--steps 3: 3 whole iterations of SGD)" in (
        audited.stderr
    )
    found = _strict_json(js)
    assert found["optimizer_steps"] == 3 and found["stopped_by_steps"]
    # the fourth iteration's forward and backward products ran before its step was refused
    assert {r["calls"] for r in found["records"]} == {4}


# --- bad options: refused with a clear message before the script runs ---------------------


@pytest.fixture
def marker_script(tmp_path):
    """A script that leaves a file behind if it ever runs."""
    script = tmp_path / "s.py"
    script.write_text(f"open({str(tmp_path / 'ran')!r}, 'w').close()\n", encoding="utf-8")
    return script


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--steps", "0"], "--steps must be >= 1, got 0"),
        (["--steps", "2.5"], "--steps must be an integer, got '2.5'"),
        (["--top", "x"], "--top must be an integer"),
        (["--depth", "0"], "--depth must be >= 1"),
        (["--rounding", "rn"], "argument --rounding: invalid choice: 'rn'"),
        (["--precision", "highest"], "argument --precision: invalid choice: 'highest'"),
        (["--gpu", "volta"], "argument --gpu: invalid choice: 'volta'"),
        (["--gpu", "Hopper"], "argument --gpu: invalid choice: 'Hopper'"),
        (["--skip", ""], "--skip needs a module name"),
        (["--skip", "a b"], "--skip needs a module name"),
        (["--json", "{tmp}/no/such/folder/a.json"], "--json {tmp}/no/such/folder/a.json: not a"),
        (["--markdown", "{tmp}"], "--markdown {tmp}: not a file in an existing folder"),
    ],
)
def test_bad_options_are_named_before_the_script_runs(
    marker_script, tmp_path, capsys, options, message
):
    options = [o.replace("{tmp}", str(tmp_path)) for o in options]
    with pytest.raises(SystemExit) as exit_:
        main([*options, str(marker_script)])
    assert exit_.value.code == 2
    assert message.replace("{tmp}", str(tmp_path)) in capsys.readouterr().err
    assert not (tmp_path / "ran").exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "the following arguments are required: script.py | module"),
        (["no_such_script.py"], "can't open file 'no_such_script.py'"),
        (["-m", "eigprec_no_such_module"], "-m eigprec_no_such_module: no module of that name"),
        (["-m", "eigprec.no.such"], "-m eigprec.no.such: No module named 'eigprec.no'"),
    ],
)
def test_a_missing_target_is_named(capsys, argv, message):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2 and message in capsys.readouterr().err


def _not_a_count(text: str) -> bool:
    try:
        return int(text) < 1
    except ValueError:
        return True


@settings(max_examples=30, deadline=None)
@given(
    flag=st.sampled_from(["--steps", "--top", "--depth"]),
    value=st.one_of(st.integers(max_value=0).map(str), st.text(min_size=1)).filter(_not_a_count),
)
def test_counts_must_be_positive_integers(flag, value):
    # (a value that starts with "-" reads as a missing argument to argparse: refused too)
    err = io.StringIO()
    with pytest.raises(SystemExit) as exit_, contextlib.redirect_stderr(err):
        main([flag, value, "s.py"])
    assert exit_.value.code == 2 and f"argument {flag}: " in err.getvalue()


def test_the_tf32_chapters_audit_section_shows_the_command_line_and_links_its_options():
    # The section a reader opens to audit their own code shows the command they run
    # (options the parser accepts, nothing executed) and links the page listing every option.
    from eigprec.audit.cli import _parser, _split

    page = (ROOT / "book" / "tf32.md").read_text(encoding="utf-8")
    start = page.index("(tf32-audit)=")
    section = page[start : page.index("\n(tf32-", start + 1)]
    blocks = re.findall(r"^```bash\n(.*?)^```", section, flags=re.S | re.M)
    commands = [line for b in blocks for line in b.splitlines() if "eigprec.audit" in line]
    assert commands, "a ```bash block with python -m eigprec.audit in the audit section"
    parser = _parser()
    for command in commands:
        words = shlex.split(command)
        assert words[:3] == ["python", "-m", "eigprec.audit"], command
        head, tail = _split(parser, words[3:])
        parser.parse_args([*head, "--", tail[0]])  # exits (status 2) on a bad option
    assert "{ref}`api-audit-cli`" in section
    assert "(api-audit-cli)=" in (ROOT / "book" / "api.md").read_text(encoding="utf-8")
