"""Parameters a SOAP step could not write, or could not compute with (issue 47, items 2 and 9).

Before: with ``b`` created under ``torch.inference_mode``, ``SOAP([a, b]).step()`` raised
torch's "Inplace update to inference tensor outside InferenceMode" from the commit, after
``a`` had been written and its step counter advanced; an expanded parameter
(``zeros(1, 2).expand(3, 2)``) failed the same way; an integer or bool parameter was
accepted and failed at ``step()`` in ``torch.finfo``. Decided: parameters that cannot be
written in place (inference tensors outside inference mode, views whose elements share
memory) are refused when the optimizer is built or a group added, and again before a step
writes anything (for a parameter put into ``param_groups`` by hand); integer and bool
parameters are refused at construction with ``TypeError``.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from eigprec import REKLS, SOAP
from eigprec._args import _shares_memory


def _inference():
    with torch.inference_mode():
        return torch.nn.Parameter(torch.zeros(3, 2))


def _expanded():
    return torch.zeros(1, 2).expand(3, 2)


def _overlapping():
    # Rows overlap by one element: (i, j) and (i + 1, j − 1) are the same memory.
    return torch.zeros(8).as_strided((3, 2), (1, 1))


UNWRITABLE = {
    "inference": (_inference, "inference tensor"),
    "expanded": (_expanded, "share memory"),
    "overlapping": (_overlapping, "share memory"),
}


@pytest.mark.parametrize("kind", list(UNWRITABLE))
@pytest.mark.parametrize("cls", [SOAP, REKLS])
def test_unwritable_parameters_are_refused_at_construction(kind, cls):
    make, words = UNWRITABLE[kind]
    a = torch.nn.Parameter(torch.zeros(3, 2))
    with pytest.raises(ValueError, match=words):
        cls([a, make()], lr=0.1)
    opt = cls([a], lr=0.1)
    with pytest.raises(ValueError, match=words):
        opt.add_param_group({"params": [make()]})
    assert len(opt.param_groups) == 1


@pytest.mark.parametrize("kind", list(UNWRITABLE))
def test_a_step_writes_nothing_when_a_later_parameter_cannot_be_written(kind):
    make, words = UNWRITABLE[kind]
    a = torch.nn.Parameter(torch.zeros(3, 2))
    opt = SOAP([a], lr=0.1)
    b = make()
    opt.param_groups[0]["params"].append(b)  # past the constructor's check
    a.grad = torch.ones(3, 2)
    b.grad = torch.ones(3, 2)
    with pytest.raises(ValueError, match=f"parameter 1 of param group 0.*{words}"):
        opt.step()
    assert torch.equal(a.detach(), torch.zeros(3, 2))
    assert not opt.state[a]  # no step counted, no state made


def test_inference_tensors_step_inside_inference_mode():
    # Where torch allows the in-place update, SOAP does too.
    with torch.inference_mode():
        b = torch.zeros(3, 2)
        opt = SOAP([b], lr=0.1)
        b.grad = torch.ones(3, 2)
        opt.step()
        assert opt.state[b]["step"] == 1 and not torch.equal(b, torch.zeros(3, 2))


@pytest.mark.parametrize(
    "p",
    [
        torch.zeros(4, 3).T,  # transposed: strided, no overlap
        torch.zeros(4, 6)[:, ::2],  # every other column
        torch.zeros(8).as_strided((2, 3), (3, 2)),  # interleaved, offsets 0 2 4 3 5 7
        torch.zeros(6, 1).expand(6, 1),  # expanding a size-1 dimension to 1 shares nothing
    ],
    ids=["transposed", "sliced", "interleaved", "size-one"],
)
def test_strided_views_without_shared_memory_are_accepted_and_stepped(p):
    opt = SOAP([p], lr=0.1)
    p.grad = torch.ones_like(p)
    opt.step()
    assert opt.state[p]["step"] == 1


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8, torch.bool])
def test_integer_and_bool_parameters_are_refused_at_construction(dtype):
    p = torch.zeros(3, 2, dtype=dtype)
    with pytest.raises(TypeError, match=f"floating.*{str(dtype).removeprefix('torch.')}"):
        SOAP([p], lr=0.1)
    opt = SOAP([torch.nn.Parameter(torch.zeros(3, 2))], lr=0.1)
    with pytest.raises(TypeError, match="floating"):
        opt.add_param_group({"params": [p]})


def test_an_integer_parameter_put_in_by_hand_is_refused_before_any_write():
    a = torch.nn.Parameter(torch.zeros(3, 2))
    opt = SOAP([a], lr=0.1)
    b = torch.zeros(3, 2, dtype=torch.int64)
    b.grad = torch.ones(3, 2, dtype=torch.int64)
    opt.param_groups[0]["params"].append(b)
    a.grad = torch.ones(3, 2)
    with pytest.raises(TypeError, match=r"parameter 1 of param group 0.*floating"):
        opt.step()
    assert torch.equal(a.detach(), torch.zeros(3, 2)) and not opt.state[a]


@settings(max_examples=200, deadline=None, database=None, derandomize=True)
@given(
    shape=st.tuples(st.integers(0, 5), st.integers(0, 5)),
    strides=st.tuples(st.integers(0, 7), st.integers(0, 7)),
)
def test_shared_memory_is_found_exactly(shape, strides):
    # The fast proof of no overlap, or the count of distinct offsets, against every pair.
    p = torch.zeros(64).as_strided(shape, strides)
    offsets = [i * strides[0] + j * strides[1] for i in range(shape[0]) for j in range(shape[1])]
    assert _shares_memory(p) == (len(set(offsets)) < len(offsets))
