"""The audit's verdict, its backward rows, its errors and ``--unfuse`` (issue 48).

A verdict per site (ordinary TF32 rounding, cancellation, inf/NaN) and one line for the
report; backward products of one forward call told apart by whose gradient they compute;
the user's operator run first, so that its errors are its own; fused attention and LSTMs
audited under ``--unfuse``; report files written all at once.
"""

from __future__ import annotations

import json
import os
import stat
import traceback

import pytest
import torch

from eigprec.audit import tf32_audit, writes
from eigprec.audit.cli import main
from eigprec.audit.verdict import ordinary_bound, site_verdict


def _one(report):
    (record,) = report.records
    return record


def test_the_worst_rounding_of_a_product_without_cancellation_is_ordinary():
    # a = b = 1 + 2**-11 is a tie: rna rounds it up to 1 + 2**-10, the largest relative
    # rounding TF32 makes; the product's error, 2u - u², stays within the bound 2u + u².
    a = torch.tensor([[1 + 2**-11]])
    with tf32_audit(rounding="rna") as report:
        _ = a @ a
    record = _one(report)
    u = 2.0**-11
    assert record.norm_error == pytest.approx(2 * u - u * u, rel=1e-6)
    assert record.norm_error < ordinary_bound("rna") == 2 * u + u * u
    assert site_verdict(record, "rna") == "ordinary"
    assert report.verdict().startswith("Verdict: all 1 sites within ordinary TF32 rounding")
    # truncation loses twice as much: 1 + 2**-10 - 2**-23 becomes 1, within rz's bound only
    b = torch.tensor([[1 + 2**-10 - 2**-23]])
    with tf32_audit(rounding="rz") as report:
        _ = b @ b
    record = _one(report)
    assert ordinary_bound("rna") < record.norm_error <= ordinary_bound("rz")
    assert site_verdict(record, "rz") == "ordinary"
    assert site_verdict(record, "rna").startswith("cancellation")


def test_cancellation_and_overflow_get_their_own_verdicts_and_the_line_counts_them():
    a = torch.tensor([[1.0, 1.0], [1.0, 1.0 + 2**-12]])
    b = torch.tensor([[1.0], [-1.0]])
    big = torch.tensor([[torch.finfo(torch.float32).max]])
    with tf32_audit() as report:
        _ = a @ b  # (0, -2**-12): TF32's rounding of a loses all of it
        _ = big @ torch.ones(1, 1)  # rounds up to 2**128: inf
        _ = torch.ones(3, 3) @ torch.ones(3, 3)
    verdicts = sorted(site_verdict(r) for r in report.records)
    rows = report.rows()
    assert sorted(row["verdict"] for row in rows) == verdicts
    assert verdicts == ["cancellation ≥1,023×", "inf/NaN", "ordinary"]
    assert report.verdict().startswith(
        "Verdict: 2 of 3 sites lose more than ordinary TF32 rounding (1 cancellation, 1 inf/NaN)"
    )
    assert "matmul_precision('highest')" in report.verdict()
    assert {row["TF32 on"] for row in rows} == {"no"}


def test_the_tf32_on_column_says_where_the_settings_ask_for_tf32():
    from eigprec import matmul_precision

    x = torch.ones(2, 2)
    with tf32_audit() as report:
        for precision in ("highest", "high", "high"):
            with matmul_precision(precision):
                _ = x @ x
    (row,) = report.rows()
    assert row["TF32 on"] == "2/3" and row["calls"] == "3"


def test_the_input_and_weight_gradients_of_a_layer_are_rows_of_their_own():
    # Equal shapes: the two backward products of x @ W.T are both 4x4 × 4x4.
    torch.manual_seed(0)
    layer = torch.nn.Linear(4, 4, bias=False)
    x = torch.randn(4, 4, requires_grad=True)
    q, k = (torch.randn(2, 3, 5, requires_grad=True) for _ in range(2))
    with tf32_audit() as report:
        for _ in range(2):
            layer(x).sum().backward()
        (q @ k.transpose(1, 2)).sum().backward()
    found = {(r.op, r.phase): r.calls for r in report.records}
    assert found == {
        ("mm", "forward"): 2,
        ("mm[input grad]", "backward (MmBackward0)"): 2,
        ("mm[weight grad]", "backward (MmBackward0)"): 2,
        ("bmm", "forward"): 1,
        ("bmm[self grad]", "backward (BmmBackward0)"): 1,
        ("bmm[mat2 grad]", "backward (BmmBackward0)"): 1,
    }


def test_an_operator_that_fails_fails_as_itself_before_the_audit_works():
    # Its traceback ends in the operator call, not in the audit's side product.
    with tf32_audit() as report, pytest.raises(RuntimeError, match="cannot be multiplied") as e:
        torch.ones(3, 4) @ torch.ones(5, 6)
    names = [frame.name for frame in traceback.extract_tb(e.value.__traceback__)]
    assert "_side_results" not in names and len(report) == 0
    # in place over an operand: the side product must run first; the error is still the op's
    a = torch.ones(3, 3)
    with tf32_audit(), pytest.raises(RuntimeError) as e:
        a.addmm_(a, torch.ones(4, 3))
    assert "size mismatch" in str(e.value) or "shapes" in str(e.value)


MODEL = """\
import torch
import torch.nn.functional as F

torch.manual_seed(0)


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = torch.nn.LSTM(8, 8, batch_first=True)
        self.qkv = torch.nn.Linear(8, 24)
        self.head = torch.nn.Linear(8, 3)

    def forward(self, x):
        h, _ = self.lstm(x)
        q, k, v = self.qkv(h).view(2, 5, 3, 2, 4).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.head(y.transpose(1, 2).reshape(2, 5, 8))


model = Model()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(2):
    opt.zero_grad()
    model(torch.randn(2, 5, 8)).square().mean().backward()
    opt.step()
"""


def test_unfuse_audits_attention_and_the_lstm_and_the_report_names_it(tmp_path, capsys):
    script = tmp_path / "model.py"
    script.write_text(MODEL, encoding="utf-8")
    found = {}
    for flags in ([], ["--unfuse"]):
        out = tmp_path / "out.json"
        assert main([*flags, "--json", str(out), str(script)]) == 0
        found[bool(flags)] = json.loads(out.read_text(encoding="utf-8"))
        found[bool(flags)]["err"] = capsys.readouterr().err
    fused, unfused = found[False], found[True]
    assert {"mkldnn_rnn_layer", "_scaled_dot_product_flash_attention_for_cpu"} <= set(
        fused["not_covered"]
    )
    assert {r["module"] for r in fused["records"]} == {"qkv", "head"}
    calls = sum(v["calls"] for v in fused["not_covered"].values())
    assert f"Note: {calls} calls of fused kernels ran out of the audit's sight" in fused["err"]
    assert "--unfuse runs them as products it can see" in fused["err"]
    # under --unfuse: the LSTM's products (at the user's line, in the layer) and
    # attention's bmm's are audited, and nothing is left uncovered
    assert unfused["not_covered"] == {}
    assert {r["module"] for r in unfused["records"]} == {"lstm", "qkv", "head", "Model"}
    lstm = [r for r in unfused["records"] if r["module"] == "lstm"]
    assert {r["site"] for r in lstm} == {"model.py:15"}
    assert {"bmm", "bmm[self grad]", "bmm[mat2 grad]"} <= {r["op"] for r in unfused["records"]}
    bound = ordinary_bound()
    for r in unfused["records"]:  # (softmax's backward cancels: its rows sum to zero)
        assert (r["verdict"] == "ordinary") == (r["norm_error"] <= bound), r
    assert "Note: --unfuse ran fused attention on its math kernel" in unfused["err"]
    assert unfused["options"]["unfuse"] and torch.backends.mha.get_fastpath_enabled()


def test_a_report_file_is_replaced_whole_or_not_at_all(tmp_path, monkeypatch):
    target = tmp_path / "audit.md"
    target.write_text("old report\n", encoding="utf-8")
    target.chmod(0o640)

    def full_disk(*_args, **_kwargs):
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as patch:
        patch.setattr(writes.os, "replace", full_disk)
        with pytest.raises(OSError, match="No space left"):
            writes.write_text(str(target), "new report\n")
    assert target.read_text(encoding="utf-8") == "old report\n"
    assert [p.name for p in tmp_path.iterdir()] == ["audit.md"]  # no temporary file left
    writes.write_text(str(target), "new report\n")
    assert target.read_text(encoding="utf-8") == "new report\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640  # a replaced file keeps its mode
    fresh = tmp_path / "fresh.json"
    old_mask = os.umask(0o027)
    try:
        writes.write_text(str(fresh), "{}\n")
    finally:
        os.umask(old_mask)
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o640  # 0o666 less the umask, as open()
    writes.write_text(os.devnull, "not a regular file: written directly\n")


def test_sampling_counts_every_call_and_measures_the_first_k_then_every_kth():
    a = torch.randn(8, 8, generator=torch.Generator().manual_seed(0))
    with tf32_audit(sample=3) as report:
        for _ in range(10):
            _ = a @ a
    record = _one(report)
    assert (record.calls, record.measured_calls) == (10, 5)  # calls 1, 2, 3, 6, 9
    (row,) = report.rows()
    assert row["calls"] == "10 (5 measured)"
    with tf32_audit() as every:
        for _ in range(10):
            _ = a @ a
    assert _one(every).measured_calls == 10 and _one(every).norm_error == record.norm_error
    assert report.rows()[0].keys() == every.rows()[0].keys()  # (no column of its own)
    with pytest.raises(ValueError, match="sample must be >= 1"):
        tf32_audit(sample=0)


SAMPLED = """\
import torch
a = torch.randn(8, 8)
for _ in range(20):
    a @ a
"""


def test_the_cli_samples_by_default_and_says_how_many_calls_it_measured(tmp_path, capsys):
    script = tmp_path / "s.py"
    script.write_text(SAMPLED, encoding="utf-8")
    out = tmp_path / "out.json"
    assert main(["--sample", "4", "--json", str(out), str(script)]) == 0
    (record,) = json.loads(out.read_text(encoding="utf-8"))["records"]
    assert (record["calls"], record["measured_calls"]) == (20, 8)  # 1-4, 8, 12, 16, 20
    err = capsys.readouterr().err
    assert "Note: 12 of 20 calls were counted, not measured (--sample 4" in err
    assert main(["--sample", "1", "--json", str(out), str(script)]) == 0
    (record,) = json.loads(out.read_text(encoding="utf-8"))["records"]
    assert record["measured_calls"] == 20 and "not measured" not in capsys.readouterr().err
