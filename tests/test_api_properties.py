"""Property tests of the public library API: a right answer or a documented exception.

Hypothesis drives every public numerical function with random shapes, dtypes, memory
layouts (contiguous, transposed views, strided slices) and special values (±0, subnormals,
huge finite values, ±inf, NaN). Each property says, for the inputs it drew, which outcome is
right: a value checked against a float64 reference or an invariant, or one of the documented
exceptions (``TypeError``/``ValueError``/``IndexError`` with a message). A call that returns
when it should raise, or raises when it should return, fails.

Runs are derandomized (fixed examples, no database) and small: the whole file takes well
under a minute on one CPU core.

"""

from __future__ import annotations

import copy
import itertools
import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eigprec import (
    REKLS,
    SOAP,
    cluster_angles,
    davis_kahan_bound,
    eigenvalue_clusters,
    kth_eigvalsh,
    matmul_3xtf32,
    principal_angles,
    round_tf32,
    split_tf32,
    subspace_angle,
    top1_angle,
)

FAST = settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
FLOATS = (torch.float32, torch.float64)
LAYOUTS = ("contiguous", "transposed", "strided")
SPECIALS = ("zero", "negzero", "subnormal", "huge", "inf", "-inf", "nan")


def _special(name: str, dtype: torch.dtype) -> float:
    fi = torch.finfo(dtype)
    return {
        "zero": 0.0,
        "negzero": -0.0,
        "subnormal": fi.smallest_normal / 8,
        "huge": fi.max / 2,
        "inf": math.inf,
        "-inf": -math.inf,
        "nan": math.nan,
    }[name]


def _laid_out(x: torch.Tensor, layout: str) -> torch.Tensor:
    """The same values as the 2-D ``x`` in another memory layout."""
    if layout == "transposed":
        return x.T.contiguous().T
    if layout == "strided":
        wide = torch.zeros(x.shape[0], 2 * x.shape[1], dtype=x.dtype)
        wide[:, ::2] = x
        return wide[:, ::2]
    return x


@st.composite
def matrices(
    draw,
    *,
    dtypes=FLOATS,
    rows=(1, 6),
    cols=(1, 6),
    specials=SPECIALS,
    max_specials=2,
    scale=1.0,
):
    """``(tensor, planted)``: a random matrix in a random layout, and its special values."""
    dtype = draw(st.sampled_from(dtypes))
    m, n = draw(st.integers(*rows)), draw(st.integers(*cols))
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    x = (torch.randn(m, n, generator=g, dtype=torch.float64) * scale).to(dtype)
    planted = []
    if specials:
        for _ in range(draw(st.integers(0, max_specials))):
            i, j = draw(st.integers(0, m - 1)), draw(st.integers(0, n - 1))
            name = draw(st.sampled_from(specials))
            x[i, j] = _special(name, dtype)
            planted.append(name)
    return _laid_out(x, draw(st.sampled_from(LAYOUTS))), planted


def _raises_documented(call, *errors):
    with pytest.raises(errors) as info:
        call()
    assert str(info.value), "a documented exception carries a message"


# -- tf32 -------------------------------------------------------------------------------------


def _round_tf32_reference(x: torch.Tensor, rounding: str) -> torch.Tensor:
    """TF32 rounding in exact float64 arithmetic: 11 significant bits, float32's exponents."""
    x64 = x.double()
    _, e = torch.frexp(x64)
    # Spacing of TF32 numbers at |x|: 2^(e−11) for normals, 2^−136 for the subnormals
    # (float32's subnormal spacing 2^−149 with 13 bits dropped).
    q = torch.ldexp(torch.ones_like(x64), (e - 11).clamp_min(-136))
    r = x64 / q  # exact: a power-of-two scaling
    if rounding == "rne":
        r = torch.round(r)  # half to even
    elif rounding == "rna":
        r = torch.sign(r) * torch.floor(r.abs() + 0.5)
    else:
        r = torch.trunc(r)
    out = (r * q).to(torch.float32)  # beyond the largest TF32 value this rounds to ±inf
    tf32_max = (2 - 2**-10) * 2.0**127
    over = (r * q).abs() > tf32_max
    out = torch.where(over, torch.copysign(torch.tensor(math.inf), x64).float(), out)
    out = torch.where(torch.isfinite(x), out, x)  # NaN and ±inf pass through
    return torch.copysign(out, x)  # signed zeros keep their sign


@FAST
@given(data=matrices(dtypes=(torch.float32,)), rounding=st.sampled_from(["rna", "rne", "rz"]))
def test_round_tf32_matches_exact_rounding(data, rounding):
    x, _ = data
    got = round_tf32(x, rounding)
    ref = _round_tf32_reference(x, rounding)
    assert got.dtype == torch.float32 and got.shape == x.shape
    assert torch.equal(torch.isnan(got), torch.isnan(x))
    keep = ~torch.isnan(x)
    assert torch.equal(got[keep], ref[keep])
    assert torch.equal(torch.signbit(got[keep]), torch.signbit(ref[keep]))


@FAST
@given(data=matrices(dtypes=(torch.float64, torch.float16, torch.bfloat16), specials=()))
def test_round_tf32_refuses_other_dtypes(data):
    x, _ = data
    _raises_documented(lambda: round_tf32(x), TypeError)
    _raises_documented(lambda: split_tf32(x), TypeError)
    _raises_documented(lambda: round_tf32(x.float(), "nearest"), ValueError)


# Huge values (finding 7: the split overflowed above |x| ≈ 3.4012e38) and ±inf/NaN included.
_SPLIT_SPECIALS = ("zero", "negzero", "subnormal", "huge", "inf", "-inf", "nan")


@FAST
@given(data=matrices(dtypes=(torch.float32,), specials=_SPLIT_SPECIALS), big=st.booleans())
def test_split_tf32_parts_are_tf32_and_sum_to_x(data, big):
    x, _ = data
    if big:
        x = x * 1e37  # up to ~5e37 before the specials' own fmax/2
    hi, lo = split_tf32(x)
    finite = torch.isfinite(x)
    assert torch.equal(hi[~finite].isnan(), x[~finite].isnan())  # NaN stays NaN
    inf = x.isinf()
    assert torch.equal(hi[inf], x[inf]) and bool((lo[inf] == 0).all())  # ±inf → (±inf, 0)
    hi, lo, x = hi[finite], lo[finite], x[finite]
    assert bool(torch.isfinite(hi).all() and torch.isfinite(lo).all())
    assert torch.equal(round_tf32(hi, "rne"), hi) and torch.equal(round_tf32(lo, "rne"), lo)
    err = (hi.double() + lo.double() - x.double()).abs()
    bound = torch.clamp(x.double().abs() * 2.0**-22, min=2.0**-136)
    assert bool((err <= bound).all())


_FINITE_SPECIALS = ("zero", "negzero", "subnormal")


@st.composite
def matmul_operands(draw):
    k = draw(st.integers(1, 6))
    specials = draw(st.sampled_from([_FINITE_SPECIALS, _SPLIT_SPECIALS]))
    a, _ = draw(matrices(dtypes=(torch.float32,), cols=(k, k), specials=specials))
    b, _ = draw(matrices(dtypes=(torch.float32,), rows=(k, k), specials=specials))
    if draw(st.booleans()):
        a = a[0]  # a 1-D left operand
    if draw(st.booleans()):
        b = b[:, 0]  # a 1-D right operand
    return a, b


@FAST
@given(ops=matmul_operands())
def test_matmul_3xtf32_is_near_float32_accurate(ops):
    a, b = ops
    got = matmul_3xtf32(a, b)
    fp32 = torch.matmul(a, b)
    if not (torch.isfinite(a).all() and torch.isfinite(b).all() and torch.isfinite(fp32).all()):
        # inf/NaN exactly where float32 gives them, with its sign (finding 7)
        assert torch.equal(got.isnan(), fp32.isnan()) and torch.equal(got.isinf(), fp32.isinf())
        assert torch.equal(got[got.isinf()], fp32[fp32.isinf()])
        return
    ref = torch.matmul(a.double(), b.double())
    k = a.shape[-1]
    a_abs, b_abs = a.double().abs(), b.double().abs()
    size = torch.matmul(a_abs, b_abs)
    # Dropped small·small term (2^-22 relative) plus float32 accumulation of k products;
    # subnormal entries lose up to 2^-137 absolute in the split (TF32 keeps 10 of their bits).
    reach = torch.matmul(torch.ones_like(a_abs), b_abs) + torch.matmul(
        a_abs, torch.ones_like(b_abs)
    )
    bound = size * (2.0**-20 + 2 * k * 2.0**-24) + 2.0**-136 * (reach + k)
    assert got.dtype == torch.float32 and got.shape == ref.shape
    assert bool(((got.double() - ref).abs() <= bound).all())


@FAST
@given(ops=matmul_operands(), wrong=st.sampled_from(["dtype", "inner", "0-d"]))
def test_matmul_3xtf32_bad_operands(ops, wrong):
    a, b = ops
    if wrong == "dtype":
        _raises_documented(lambda: matmul_3xtf32(a.double(), b), TypeError)
    elif wrong == "inner":
        b2 = torch.cat([b, b[:1]]) if b.dim() == 1 else torch.cat([b, b[:1]], dim=0)
        _raises_documented(lambda: matmul_3xtf32(a, b2), ValueError)
    else:
        _raises_documented(lambda: matmul_3xtf32(a, torch.tensor(1.0)), ValueError)


# -- subspace geometry -----------------------------------------------------------------------


@st.composite
def bases(draw, n=None, dtypes=FLOATS):
    """An ``(n, p)`` orthonormal basis in a random dtype and layout, with its float64 span."""
    n = n if n is not None else draw(st.integers(1, 8))
    p = draw(st.integers(1, n))
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    Q = torch.linalg.qr(torch.randn(n, p, generator=g, dtype=torch.float64)).Q
    dtype = draw(st.sampled_from(dtypes))
    return _laid_out(Q.to(dtype), draw(st.sampled_from(LAYOUTS)))


def _reference_angles(A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """Principal angles (degrees) of the float64 spans via the SVD of QᵀQ, arccos only."""
    QA, QB = torch.linalg.qr(A.double()).Q, torch.linalg.qr(B.double()).Q
    cos = torch.linalg.svdvals(QA.T @ QB).clamp(0, 1)
    return torch.rad2deg(torch.arccos(cos))  # cosines descend, so angles ascend


@FAST
@given(data=st.data())
def test_principal_angles_against_a_float64_reference(data):
    n = data.draw(st.integers(1, 8))
    low = (*FLOATS, torch.float16, torch.bfloat16)  # accepted: any floating dtype
    A, B = data.draw(bases(n=n, dtypes=low)), data.draw(bases(n=n))
    got = principal_angles(A, B)
    ref = _reference_angles(A, B)
    assert got.dtype == torch.float64 and got.shape == (min(A.shape[1], B.shape[1]),)
    assert bool(((got >= 0) & (got <= 90)).all()) and bool((got[1:] >= got[:-1]).all())
    # arccos in the reference loses half the digits near 0°: sqrt(eps)-level agreement.
    assert torch.allclose(got, ref, atol=1e-5, rtol=0)
    assert torch.allclose(principal_angles(B, A), got, atol=1e-9, rtol=0)
    assert principal_angles(A, A).max().item() < 1e-9  # identical spans: no slack angle
    k = data.draw(st.integers(1, min(A.shape[1], B.shape[1]) + 1))
    if k > min(A.shape[1], B.shape[1]):
        _raises_documented(lambda: subspace_angle(A, B, k), ValueError)
    else:
        expected = principal_angles(A[:, :k], B[:, :k]).max().item()
        assert subspace_angle(A, B, k) == pytest.approx(expected, abs=1e-12)


@FAST
@given(data=st.data(), special=st.sampled_from(("inf", "-inf", "nan")))
def test_subspace_functions_refuse_non_finite_entries(data, special):
    A = data.draw(bases()).clone()
    A[data.draw(st.integers(0, A.shape[0] - 1)), 0] = _special(special, A.dtype)
    _raises_documented(lambda: principal_angles(A, A), ValueError)
    _raises_documented(lambda: subspace_angle(A, A, 1), ValueError)
    _raises_documented(lambda: top1_angle(A, A), ValueError)


@FAST
@given(A=bases(), factor=st.sampled_from([0.0, 0.5, 1 + 1e-3, 2.0, 1e30]))
def test_principal_angles_refuse_columns_that_are_not_orthonormal(A, factor):
    B = A * factor
    _raises_documented(lambda: principal_angles(B, A), ValueError)


@FAST
@given(
    A=bases(),
    bad=st.sampled_from(["list", "int", "3-d", "degrees", "k-bool", "k-float", "empty"]),
)
def test_subspace_functions_refuse_bad_arguments(A, bad):
    calls = {
        "list": (lambda: subspace_angle(A.tolist(), A, 1), TypeError),
        "int": (lambda: principal_angles(A.to(torch.int64), A), TypeError),
        "3-d": (lambda: principal_angles(A[None], A), ValueError),
        "degrees": (lambda: principal_angles(A, A, degrees="no"), TypeError),
        "k-bool": (lambda: subspace_angle(A, A, True), TypeError),
        "k-float": (lambda: subspace_angle(A, A, 1.0), TypeError),
        "empty": (lambda: principal_angles(A[:, :0], A), ValueError),
    }
    call, error = calls[bad]
    _raises_documented(call, error)


@st.composite
def vectors(draw, n):
    dtype = draw(st.sampled_from((torch.float32, torch.float64, torch.float16, torch.bfloat16)))
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    x = torch.randn(n, generator=g, dtype=torch.float64)
    scale = draw(st.sampled_from(["one", "subnormal", "huge"]))
    fi = torch.finfo(dtype)
    # Every entry in the drawn range: all subnormal, or all near the dtype's maximum.
    if scale == "subnormal":
        x = x.sign() * fi.smallest_normal / 4 * (1 + x.abs().clamp(max=2)) / 3
    elif scale == "huge":
        x = x.sign() * fi.max / 2 * (1 + x.abs().clamp(max=1)) / 2
    x = x.to(dtype)
    if (x == 0).all():
        x[0] = fi.smallest_normal  # keep a line, not a zero vector
    layout = draw(st.sampled_from(["vector", "column", "strided"]))
    if layout == "column":
        return x[:, None]
    if layout == "strided":
        return torch.stack([x, x]).T[:, 0]
    return x


@FAST
@given(data=st.data())
def test_top1_angle_against_a_float64_reference(data):
    n = data.draw(st.integers(1, 6))
    a, b = data.draw(vectors(n)), data.draw(vectors(n))
    u, v = a.double().reshape(-1), b.double().reshape(-1)
    u, v = u / u.abs().max(), v / v.abs().max()  # exact rescaling before the norms
    cos = (u @ v).abs() / (u.norm() * v.norm())
    got = top1_angle(a, b)
    assert 0.0 <= got <= 90.0
    assert math.cos(math.radians(got)) == pytest.approx(cos.clamp(0, 1).item(), abs=1e-12)
    assert top1_angle(a, a) < 1e-6


@st.composite
def spectra(draw):
    dtype = draw(st.sampled_from(FLOATS))
    base = draw(
        st.lists(
            st.sampled_from([0.0, 1.0, -1.0, 2.0, 1e-3, 1 + 1e-9, 5.0, 1e30, -1e30]),
            min_size=1,
            max_size=8,
        )
    )
    scale = draw(st.sampled_from([1.0, 0.0, 1e-300, 1e-40, 1e250]))
    lam = torch.tensor(base, dtype=torch.float64) * scale
    lam = lam.to(dtype).sort(descending=draw(st.booleans())).values
    return lam


@FAST
@given(lam=spectra(), rel_gap=st.sampled_from([1e-12, 1e-3, 0.1, 0.5, 2.0]))
def test_eigenvalue_clusters_partition_at_the_stated_gaps(lam, rel_gap):
    if not torch.isfinite(lam).all():  # 1e30 · 1e250 overflows: documented refusal
        _raises_documented(lambda: eigenvalue_clusters(lam, rel_gap), ValueError)
        return
    clusters = eigenvalue_clusters(lam, rel_gap)
    x = lam.double().tolist()
    assert clusters[0][0] == 0 and clusters[-1][1] == len(x)
    assert all(a[1] == b[0] and a[0] < a[1] for a, b in itertools.pairwise(clusters))
    threshold = rel_gap * max(abs(v) for v in x)
    cuts = {start for start, _ in clusters[1:]}
    for i in range(1, len(x)):
        gap = abs(x[i] - x[i - 1])
        assert (i in cuts) == (gap > 0 and gap >= threshold), (i, gap, threshold)


@FAST
@given(lam=spectra(), seed=st.integers(0, 2**31 - 1))
def test_cluster_angles_ignore_rotations_inside_clusters(lam, seed):
    lam = lam.nan_to_num(posinf=1.0, neginf=-1.0).sort(descending=True).values
    n = lam.numel()
    g = torch.Generator().manual_seed(seed)
    Q = torch.linalg.qr(torch.randn(n + 1, n, generator=g, dtype=torch.float64)).Q
    rotated = Q.clone()
    for start, stop in eigenvalue_clusters(lam, 1e-3):
        R = torch.linalg.qr(torch.randn(stop - start, stop - start, generator=g).double()).Q
        rotated[:, start:stop] = Q[:, start:stop] @ R
    out = cluster_angles(Q, rotated, lam, 1e-3)
    assert [(c.start, c.stop) for c in out] == eigenvalue_clusters(lam, 1e-3)
    assert max(c.angle for c in out) < 1e-9


@FAST
@given(
    norm=st.one_of(
        st.floats(0, 1e300),
        st.sampled_from([0.0, 5e-324, 1e308, math.inf, -1.0, math.nan, True]),
    ),
    gap=st.one_of(st.floats(1e-300, 1e300), st.sampled_from([5e-324, 0.0, -1.0, math.inf])),
)
def test_davis_kahan_bound_against_the_formula(norm, gap):
    if isinstance(norm, bool):
        _raises_documented(lambda: davis_kahan_bound(norm, gap), TypeError)
        return
    if not (math.isfinite(norm) and norm >= 0) or not gap > 0:
        _raises_documented(lambda: davis_kahan_bound(norm, gap), ValueError)
        return
    got = davis_kahan_bound(norm, gap, degrees=False)
    assert 0.0 <= got <= math.pi / 2
    if norm < gap and norm / (gap - norm) < 1:
        assert got == pytest.approx(math.asin(norm / (gap - norm)), rel=1e-12, abs=0)
    elif norm >= gap:
        assert got == math.pi / 2


# -- kth_eigvalsh ---------------------------------------------------------------------------


@st.composite
def symmetric_batches(draw):
    n = draw(st.integers(1, 5))
    batch = draw(st.sampled_from([(), (2,), (2, 1)]))
    dtype = draw(st.sampled_from(FLOATS))
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    # 1e37: near float32's top (eigenvalues stay below its maximum); 1e-41: float32 subnormals.
    scale = draw(st.sampled_from([1.0, 0.0, 1e-30, 1e30, 1e37, 1e-41]))
    X = torch.randn(*batch, n, n, generator=g, dtype=torch.float64)
    A = ((X + X.mT) * scale).to(dtype)
    if draw(st.booleans()):
        A = A.mT.contiguous().mT  # a transposed view (same values: A is symmetric)
    return A


@FAST
@given(A=symmetric_batches(), data=st.data())
def test_kth_eigvalsh_against_a_float64_reference(A, data):
    n = A.shape[-1]
    k = data.draw(st.integers(-n - 1, n))
    if not -n <= k < n:
        _raises_documented(lambda: kth_eigvalsh(A, k), IndexError)
        return
    ref = torch.linalg.eigvalsh(A.double())[..., k]
    got = kth_eigvalsh(A, k)
    assert got.dtype == A.dtype and got.shape == A.shape[:-2]
    # Backward stable: error ≲ n · eps · ‖A‖₂ ≤ n · eps · ‖A‖_F, plus subnormal spacing.
    fi = torch.finfo(A.dtype)
    tol = 8 * n * fi.eps * (torch.linalg.matrix_norm(A.double()) + fi.smallest_normal)
    assert bool(((got.double() - ref).abs() <= tol).all())


@FAST
@given(A=symmetric_batches(), special=st.sampled_from(("inf", "-inf", "nan")))
def test_kth_eigvalsh_reads_only_the_lower_triangle(A, special):
    n = A.shape[-1]
    A = A.clone()
    if n > 1:  # a special value in the unread upper triangle changes nothing
        clean = kth_eigvalsh(A, -1)
        A[..., 0, n - 1] = _special(special, A.dtype)
        assert torch.equal(kth_eigvalsh(A, -1), clean)
    A[..., n - 1, 0] = _special(special, A.dtype)  # in the read triangle: documented NaN
    assert bool(torch.isnan(kth_eigvalsh(A, 0)).all())


@FAST
@given(bad=st.sampled_from(["list", "int", "half", "1-d", "nonsquare", "k-float", "k-bool"]))
def test_kth_eigvalsh_bad_arguments(bad):
    A = torch.eye(3)
    calls = {
        "list": (lambda: kth_eigvalsh(A.tolist(), 0), TypeError),  # a wrong type: TypeError
        "int": (lambda: kth_eigvalsh(A.to(torch.int64), 0), TypeError),
        "half": (lambda: kth_eigvalsh(A.half(), 0), TypeError),
        "1-d": (lambda: kth_eigvalsh(A[0], 0), ValueError),
        "nonsquare": (lambda: kth_eigvalsh(A[:2], 0), ValueError),
        "k-float": (lambda: kth_eigvalsh(A, 1.0), TypeError),
        "k-bool": (lambda: kth_eigvalsh(A, True), TypeError),
    }
    call, error = calls[bad]
    _raises_documented(call, error)


# -- SOAP -----------------------------------------------------------------------------------


@st.composite
def soap_options(draw):
    return {
        "use_kl_shampoo": draw(st.booleans()),
        "use_eigh": draw(st.booleans()),
        "dtype": draw(st.sampled_from(FLOATS)),
        "eps_mode": draw(st.sampled_from(["absolute", "relative"])),
        "nesterov": draw(st.booleans()),
        "weight_decay_method": draw(st.sampled_from(["decoupled", "independent", "l2", "palm"])),
        "max_update_rms": draw(st.sampled_from([0.0, 1.0])),
        "fp32_matmul_prec": "highest",
        "qr_fp32_matmul_prec": "highest",
    }


def _soap_state(opt, params):
    out = []
    for p in params:
        s = opt.state[p]
        out.append((p.detach().clone(), {k: copy.deepcopy(v) for k, v in s.items()}))
    return out


def _same_state(opt, params, before) -> bool:
    for p, (value, state) in zip(params, before, strict=True):
        if not torch.equal(p.detach(), value) or set(opt.state[p]) != set(state):
            return False
        for k, v in state.items():
            now = opt.state[p][k]
            if not (torch.equal(now, v) if torch.is_tensor(v) else now == v):
                return False
    return True


@settings(FAST, max_examples=30)
@given(
    options=soap_options(),
    grads=st.lists(matrices(rows=(1, 5), cols=(1, 5), scale=1.0), min_size=1, max_size=2),
    spike=st.sampled_from([1.0, 1e10, 1e20, 1e30]),
    steps=st.integers(1, 3),
)
def test_soap_step_is_right_or_refused_with_nothing_changed(options, grads, spike, steps):
    params = [torch.nn.Parameter(torch.zeros_like(g, dtype=torch.float32)) for g, _ in grads]
    opt = SOAP(params, lr=0.01, **options)
    for _ in range(steps):
        before = _soap_state(opt, params)
        for p, (g, _) in zip(params, grads, strict=True):
            g = g * spike  # float64 draws overflow float32 here from 1e30 · huge on
            p.grad = g if g.dtype == p.dtype else _laid_out(g.to(p.dtype), "transposed")
        finite = all(torch.isfinite(p.grad).all() for p in params)
        try:
            opt.step()
        except ValueError as err:
            # Documented: NaN/inf gradients, or a finite spike that would overflow the state.
            assert ("overflow" if finite else "NaN or inf") in str(err)
            assert _same_state(opt, params, before), "a refused step changed something"
            return
        assert finite, "a step with a NaN/inf gradient went through"
        for p in params:
            assert torch.isfinite(p).all()
            for v in opt.state[p].values():
                assert not torch.is_tensor(v) or (torch.isfinite(v).all() and v.dtype == opt.dtype)


@FAST
@given(
    name=st.sampled_from(["lr", "betas", "shampoo_beta", "eps", "weight_decay", "nesterov"]),
    value=st.sampled_from(
        [-1.0, math.nan, math.inf, 1.0, 2.0, True, "no", None, (0.5, 1.0), (2.0, 0.9), 0.5]
    ),
    where=st.sampled_from(["constructor", "group", "edited"]),
)
def test_soap_hyperparameters_are_checked_wherever_they_are_set(name, value, where):
    ok = {
        "lr": lambda v: type(v) is float and 0 <= v < math.inf,
        "betas": lambda v: isinstance(v, tuple) and all(0 <= b < 1 for b in v),
        "shampoo_beta": lambda v: type(v) is float and 0 <= v < 1,
        "eps": lambda v: type(v) is float and 0 < v < math.inf,
        "weight_decay": lambda v: type(v) is float and 0 <= v < math.inf,
        "nesterov": lambda v: isinstance(v, bool),
    }[name](value)
    if name == "nesterov" and where != "constructor":
        return  # an optimizer-wide option, not a group's
    p, q = torch.nn.Parameter(torch.zeros(2, 2)), torch.nn.Parameter(torch.zeros(3, 2))

    def run():
        if where == "constructor":
            opt = SOAP([p, q], **{"lr": 0.1, name: value})
        elif where == "group":
            opt = SOAP([{"params": [p]}, {"params": [q], name: value}], lr=0.1)
        else:
            opt = SOAP([p, q], lr=0.1)
            opt.param_groups[0][name] = value
        p.grad, q.grad = torch.ones(2, 2), torch.ones(3, 2)
        opt.step()

    if ok:
        run()
        assert torch.isfinite(p).all()
    else:
        _raises_documented(run, TypeError, ValueError)
        assert torch.equal(p.detach(), torch.zeros(2, 2))  # refused before any update


_FLAG_NAMES = ("nesterov", "correct_bias", "use_eigh", "use_kl_shampoo", "track_diagnostics")


@FAST
@given(
    cls=st.sampled_from([SOAP, REKLS]),
    name=st.sampled_from(_FLAG_NAMES),
    value=st.sampled_from([True, False, "no", "", 1, 0, None, 1.0]),
)
def test_soap_flags_take_bools_only(cls, name, value):
    p = torch.nn.Parameter(torch.zeros(2, 2))
    if cls is REKLS and name in ("use_eigh", "use_kl_shampoo"):
        _raises_documented(lambda: cls([p], lr=0.1, **{name: value}), TypeError)
    elif isinstance(value, bool):
        assert getattr(cls([p], lr=0.1, **{name: value}), name) is value
    else:
        _raises_documented(lambda: cls([p], lr=0.1, **{name: value}), TypeError)


@settings(FAST, max_examples=20)
@given(
    first=soap_options(),
    second=st.one_of(st.none(), soap_options()),  # None: the same options again
    shape=st.tuples(st.integers(1, 4), st.integers(1, 4)),
)
def test_soap_checkpoints_resume_exactly_or_are_refused(first, second, shape):
    second = first if second is None else second
    g = torch.Generator().manual_seed(sum(shape))
    grads = [torch.randn(shape, generator=g) for _ in range(3)]
    p = torch.nn.Parameter(torch.zeros(shape))
    opt = SOAP([p], lr=0.01, **first)
    for grad in grads[:2]:
        p.grad = grad
        opt.step()
    q = torch.nn.Parameter(p.detach().clone())
    other = SOAP([q], lr=0.01, **second)
    if any(first[k] != second[k] for k in first):
        _raises_documented(lambda: other.load_state_dict(opt.state_dict()), ValueError)
        assert other.state[q] == {}
        return
    other.load_state_dict(opt.state_dict())
    clone = copy.deepcopy(opt)
    c = clone.param_groups[0]["params"][0]
    p.grad, q.grad, c.grad = grads[2], grads[2].clone(), grads[2].clone()
    for o in (opt, other, clone):
        o.step()
    assert torch.equal(p, q) and torch.equal(p, c)
