"""The one first step of the TF32 dispatch modes: ``_tf32_dispatch.triage`` (issue 19).

The emulator (``TF32EmulationMode``), the audit (``AuditMode``) and the A/B attribution
(``AttributionMode``) all start by deciding whether an operator is worth a look; they share
one function for it, which caches the answer per operator.
"""

from __future__ import annotations

import torch

from eigprec.audit import mode as _audit_mode
from eigprec.audit import tf32_attribution, tf32_audit
from eigprec.tf32 import dispatch as _tf32_dispatch
from eigprec.tf32 import emulate_tf32
from eigprec.tf32.dispatch import triage

aten = torch.ops.aten


def test_ordinary_operators_run_untouched_and_are_cached():
    a = torch.ones(2, 2)
    assert triage(aten.add.Tensor, (a, a), None) is None
    assert _tf32_dispatch._ORDINARY[aten.add.Tensor] is True
    assert triage(aten.add.Tensor, (a, a), {"alpha": 2}) is None


def test_products_come_with_their_multiplied_operands():
    a = torch.ones(2, 2)
    packet, operands, kwargs = triage(aten.mm.default, (a, a), None)
    assert (packet, operands, kwargs) == (aten.mm, (0, 1), {})
    assert triage(aten.addmm.default, (a, a, a), {"beta": 0.5})[1:] == ((1, 2), {"beta": 0.5})
    x, w = torch.ones(1, 1, 4), torch.ones(1, 1, 2)
    conv = (x, w, None, [1], [0], [1], False, [0], 1)
    assert triage(aten.convolution.default, conv, {})[:2] == (aten.convolution, (0, 1))
    assert _tf32_dispatch._ORDINARY[aten.mm.default] is False


def test_opaque_rebuilt_and_composite_operators_are_looked_into():
    a = torch.ones(3, 2)
    for func, args in (
        (aten._euclidean_dist.default, (a, a)),  # rebuilt from visible pieces
        (aten.matmul.default, (a, a.T)),  # CompositeImplicitAutograd
    ):
        packet, operands, _ = triage(func, args, None)
        assert packet is func.overloadpacket and operands is None
    lstm = next(p for p in _tf32_dispatch.opaque.OPAQUE if p.__name__ == "mkldnn_rnn_layer")
    assert not _tf32_dispatch.composite(lstm.default)
    assert triage(lstm.default, (), None)[1] is None  # named as not covered


def test_sparse_and_nested_arguments_pass_through():
    dense = torch.ones(2, 2)
    assert triage(aten.mm.default, (dense.to_sparse(), dense), None) is None
    assert triage(aten.mm.default, (dense, dense), {"x": [dense.to_sparse()]}) is None


def test_the_audit_names_the_operators_the_triage_looks_into():
    # The audit's list of operators out of its sight is the triage's list of opaque and
    # rebuilt ones: an operator in one and not the other would skip the fast path wrongly.
    assert set(_audit_mode._NOT_SEEN) == _tf32_dispatch._OPAQUE_OR_REBUILT


def test_every_mode_starts_with_the_triage(monkeypatch):
    calls: dict[str, int] = {}
    original = _tf32_dispatch.triage

    def counting(name):
        def triage_(func, args, kwargs):
            calls[name] = calls.get(name, 0) + 1
            return original(func, args, kwargs)

        return triage_

    import eigprec.tf32.emulate

    monkeypatch.setattr(eigprec.tf32.emulate, "triage", counting("emulator"))
    a = torch.randn(4, 4, generator=torch.Generator().manual_seed(0))
    with emulate_tf32():
        a @ a
    monkeypatch.setattr(_audit_mode, "triage", counting("audit"))
    with tf32_audit() as report:
        a @ a
    assert [r.op for r in report.records] == ["mm"]
    calls_before = calls.get("audit", 0)
    tf32_attribution(lambda: a @ a)  # AttributionMode is an AuditMode: the same triage
    assert calls["emulator"] >= 1 and calls["audit"] > calls_before >= 1
