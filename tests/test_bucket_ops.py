"""pycomm.bucket_ops and torch.ops.pycomm.{flatten, flatten_into, unflatten}.

References are torch computed the way the kernels compute: in float64 when the
source or the bucket is float64, else in float32, then `.to(dtype)`. Against
those, results must match bit for bit (NaN payloads aside, since torch's own
NaN bits differ between its scalar and vector paths). Against the naive
reference `torch.cat(...).to(dtype) * scale` (cast first, two roundings) they
match exactly for scale 1 and powers of two, and within one unit in the last
place of the bucket dtype (rtol 2 * eps) for other scales.
"""
import math

import pytest
import torch

from pycomm import bucket_ops

pytestmark = pytest.mark.fast

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
PAIRS = [(s, d) for s in DTYPES for d in DTYPES]
SIZES = [0, 1, 7, 1023, (1 << 20) + 3]
INT_OF = {2: torch.int16, 4: torch.int32, 8: torch.int64}
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
DEVICES = ["cpu", pytest.param("cuda", marks=[cuda, pytest.mark.gpu])]


def name(dtype):
    return str(dtype).replace("torch.", "")


def compute_dtype(*dtypes):
    return torch.float64 if torch.float64 in dtypes else torch.float32


def specials(dtype):
    """Values where rounding is easy to get wrong: ties, subnormals, overflow, inf, NaN."""
    f32_bits = [
        0x3F808000, 0x3F818000, 0xBF808000,  # bfloat16 ties (round to even, up and down)
        0x3F801000, 0x3F803000,  # float16 ties
        0x3F807FFF, 0x3F808001,  # just below / above a bfloat16 tie
        0x00000001, 0x00400000, 0x80000003,  # float32 subnormals
        0x33800000, 0x33C00000, 0x387FC000,  # float16 subnormal range, a tie in it
        0x477FF000, 0x477FEFFF, 0x7F7FFFFF, 0xFF7FFFFF,  # float16 overflow edge, max float32
        0x7F800000, 0xFF800000, 0x7FC00000, 0x00000000, 0x80000000,  # inf, NaN, +-0
    ]
    x32 = torch.tensor(f32_bits, dtype=torch.int64).to(torch.int32).view(torch.float32)
    if dtype == torch.float64:
        f64_bits = [0x3FF0000010000000, 0x3FF0000030000000, 0x3FF000000FFFFFFF,  # float32 ties
                    0x36A0000000000000, 0x7FEFFFFFFFFFFFFF]  # float32 underflow, max float64
        x64 = torch.tensor(f64_bits, dtype=torch.int64).view(torch.float64)
        return torch.cat([x32.double(), x64])
    return x32.to(dtype)


def make_values(n, dtype, gen, with_specials=True):
    x = (torch.randn(n, generator=gen, dtype=torch.float64) * 8).to(dtype)
    if with_specials and n > 0:
        s = specials(dtype)[:n]
        x[: s.numel()] = s
    return x


def make_list(n, dtype, gen, with_specials=True):
    """A gradient-like list: the n-element tensor first, so later offsets are odd."""
    shapes = [(n,), (0,), (5, 3), (1,), (2, 0, 4), (7, 1)]
    return [make_values(math.prod(s), dtype, gen, with_specials).reshape(s) for s in shapes]


def reference(tensors, dtype, scale):
    flat = torch.cat([t.flatten() for t in tensors]) if tensors else torch.empty(0)
    if scale == 1.0:
        return flat.to(dtype)
    return (flat.to(compute_dtype(flat.dtype, dtype)) * scale).to(dtype)


def assert_same_bits(got, want):
    """Bitwise equal, except that any NaN matches any NaN."""
    assert got.dtype == want.dtype and got.shape == want.shape
    got, want = got.flatten(), want.flatten()
    ibits = INT_OF[got.element_size()]
    g, w = got.view(ibits), want.view(ibits)
    if torch.equal(g, w):
        return
    where = (g != w).nonzero().flatten()
    both_nan = torch.isnan(got[where]) & torch.isnan(want[where])
    bad = where[~both_nan][:5]
    if bad.numel():
        pytest.fail(f"bits differ at {bad.tolist()}: got {got[bad].tolist()} "
                    f"want {want[bad].tolist()}")


@pytest.fixture
def gen():
    return torch.Generator().manual_seed(1234)


# ---- values --------------------------------------------------------------------------------

@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("src,dst", PAIRS, ids=[f"{name(s)}->{name(d)}" for s, d in PAIRS])
def test_flatten_unflatten_match_torch(src, dst, n, gen):
    ts = make_list(n, src, gen)
    total = sum(t.numel() for t in ts)
    for scale in (1.0, 0.25, 1 / 3) if n < 4096 else (1.0, 1 / 3):
        flat = bucket_ops.flatten(ts, dtype=dst, scale=scale)
        assert flat.shape == (total,) and flat.dtype == dst
        assert_same_bits(flat, reference(ts, dst, scale))

        # Into a longer preallocated bucket: the tail stays as it was.
        out = torch.full((total + 3,), 7.0, dtype=dst)
        assert bucket_ops.flatten(ts, scale=scale, out=out) is out
        assert_same_bits(out[:total], flat)
        assert torch.equal(out[total:], torch.full((3,), 7.0, dtype=dst))

        # Back, with its own scale and the cast back to the tensors' dtype.
        outs = [torch.empty_like(t) for t in ts]
        back = 1 / scale
        bucket_ops.unflatten(out, outs, scale=back)
        offset = 0
        for o in outs:
            want = reference([flat[offset: offset + o.numel()]], src, back).reshape(o.shape)
            assert_same_bits(o, want)
            offset += o.numel()


@pytest.mark.parametrize("src,dst", [(s, d) for s, d in PAIRS
                                     if torch.finfo(d).bits >= torch.finfo(s).bits and
                                     (s, d) != (torch.float16, torch.bfloat16) and
                                     (s, d) != (torch.bfloat16, torch.float16)])
@pytest.mark.parametrize("scale", [1.0, 0.25])
def test_round_trip_is_exact(src, dst, scale, gen):
    """Through a bucket that holds every value exactly, and a power-of-two scale, and back."""
    # Scaling subnormals down would drop their low bits: specials only unscaled.
    ts = make_list(1023, src, gen, with_specials=scale == 1.0)
    flat = bucket_ops.flatten(ts, dtype=dst, scale=scale)
    outs = [torch.full_like(t, 3.0) for t in ts]
    bucket_ops.unflatten(flat, outs, scale=1 / scale)
    for o, t in zip(outs, ts):
        assert_same_bits(o, t)


@pytest.mark.parametrize("src,dst", PAIRS, ids=[f"{name(s)}->{name(d)}" for s, d in PAIRS])
@pytest.mark.parametrize("scale", [1.0, 0.5, 1 / 3, 0.1])
def test_flatten_vs_cast_then_scale(src, dst, scale, gen):
    """The issue's reference, torch.cat(ts).to(dtype) * scale, on ordinary values."""
    ts = make_list(1023, src, gen, with_specials=False)
    naive = torch.cat([t.flatten() for t in ts]).to(dst) * scale
    got = bucket_ops.flatten(ts, dtype=dst, scale=scale)
    if scale == 1.0 or math.frexp(scale)[0] == 0.5:  # 1 or a power of two: exact
        assert_same_bits(got, naive)
    else:
        eps = torch.finfo(dst).eps
        torch.testing.assert_close(got, naive, rtol=2 * eps, atol=0)


def bit_patterns(dtype, gen):
    """Every float16/bfloat16 value; 2^17 random bit patterns of the wider types."""
    if dtype in (torch.float16, torch.bfloat16):
        return torch.arange(-(1 << 15), 1 << 15, dtype=torch.int32).to(torch.int16).view(dtype)
    ibits = INT_OF[torch.finfo(dtype).bits // 8]
    lo, hi = torch.iinfo(ibits).min, torch.iinfo(ibits).max
    return torch.randint(lo, hi, (1 << 17,), generator=gen, dtype=torch.int64).to(ibits).view(dtype)


@pytest.mark.parametrize("src", DTYPES, ids=name)
def test_all_bit_patterns(src, gen):
    """Rounding, subnormals, overflow and NaN over the whole range, against torch."""
    x = bit_patterns(src, gen)
    for dst in DTYPES:
        for scale in (1.0, 0.3, 1e-30, 3e5):
            assert_same_bits(bucket_ops.flatten([x], dtype=dst, scale=scale),
                             reference([x], dst, scale))


def test_unscaled_same_dtype_is_a_copy_of_the_bits():
    payload_nans = torch.tensor([0x7FC00001, 0xFFC00123, 0x7F800001], dtype=torch.int64)
    t = payload_nans.to(torch.int32).view(torch.float32)
    flat = bucket_ops.flatten([t, t])
    assert torch.equal(flat.view(torch.int32), torch.cat([t, t]).view(torch.int32))


# ---- list shapes ---------------------------------------------------------------------------

def test_list_shapes(gen):
    one = [torch.randn(4, 5, generator=gen)]
    assert torch.equal(bucket_ops.flatten(one), one[0].flatten())

    empty = bucket_ops.flatten([])
    assert empty.shape == (0,) and empty.dtype == torch.get_default_dtype()
    assert bucket_ops.flatten([], dtype=torch.bfloat16).dtype == torch.bfloat16
    assert bucket_ops.flatten([torch.empty(0), torch.empty(3, 0)], scale=2.0).shape == (0,)

    out = torch.full((4,), 5.0)
    bucket_ops.flatten([], out=out)
    bucket_ops.unflatten(out, [])
    bucket_ops.unflatten(torch.empty(0), [torch.empty(0, 2)])
    assert torch.equal(out, torch.full((4,), 5.0))

    # Many small tensors, some empty, from an iterable.
    many = [torch.randn(i % 11, generator=gen) for i in range(500)]
    flat = bucket_ops.flatten(iter(many), dtype=torch.float16, scale=0.5)
    assert_same_bits(flat, reference(many, torch.float16, 0.5))
    outs = [torch.empty_like(t) for t in many]
    bucket_ops.unflatten(flat, (o for o in outs))
    for o, t in zip(outs, many):
        assert_same_bits(o, (t * 0.5).half().float())


def test_model_parameters():
    model = torch.nn.Sequential(torch.nn.Linear(7, 5), torch.nn.LayerNorm(5), torch.nn.Linear(5, 3))
    flat = bucket_ops.flatten(model.parameters(), scale=0.5)
    assert torch.equal(flat, torch.cat([p.detach().flatten() for p in model.parameters()]) * 0.5)
    bucket_ops.unflatten(flat, [p.data for p in model.parameters()], scale=2.0)


# ---- errors ----------------------------------------------------------------------------------

def _bad_flatten_calls():
    f = torch.randn
    return [
        ("non-contiguous", lambda: ([f(3), f(4, 5).t()], {}), ValueError, "tensors[1]"),
        ("mixed devices", lambda: ([f(3), torch.empty(3, device="meta")], {}), ValueError,
         "tensors[1]"),
        ("integer dtype", lambda: ([torch.arange(3)], {}), TypeError, "tensors[0]"),
        ("mixed dtypes", lambda: ([f(3), f(3).half()], {}), TypeError, "tensors[1]"),
        ("bucket dtype", lambda: ([f(3)], {"dtype": torch.int32}), TypeError, "dtype"),
        ("sparse", lambda: ([f(3), f(3).to_sparse()], {}), TypeError, "tensors[1]"),
    ]


@pytest.mark.parametrize("case", _bad_flatten_calls(), ids=lambda c: c[0])
def test_flatten_rejects(case):
    _, make, error, arg = case
    tensors, kwargs = make()
    with pytest.raises(error, match=arg.replace("[", r"\[")):
        bucket_ops.flatten(tensors, **kwargs)


def _bad_into_calls():
    base = torch.zeros(64)
    f = torch.randn
    return [
        ("non-contiguous", lambda: ([f(3), f(4, 5).t()], torch.zeros(30)), ValueError,
         "tensors[1]"),
        ("integer dtype", lambda: ([f(3), torch.arange(3)], torch.zeros(8)), TypeError,
         "tensors[1]"),
        ("out dtype", lambda: ([f(3)], torch.zeros(3, dtype=torch.int32)), TypeError, "out"),
        ("out too small", lambda: ([f(3), f(5)], torch.zeros(7)), ValueError, "out has 7"),
        ("out 2-D", lambda: ([f(3)], torch.zeros(2, 3)), ValueError, "out must be 1-D"),
        ("out strided", lambda: ([f(3)], torch.zeros(8)[::2]), ValueError, "out must be contig"),
        ("out aliases", lambda: ([f(3), base[10:20]], base[15:40]), ValueError,
         "tensors[1] shares memory with out"),
        ("sparse out", lambda: ([f(3)], torch.zeros(3).to_sparse()), TypeError, "out"),
        ("dtype vs out", lambda: ([f(3)], torch.zeros(3)), TypeError, "dtype"),
    ]


@pytest.mark.parametrize("case", _bad_into_calls(), ids=lambda c: c[0])
def test_flatten_into_rejects_and_leaves_out_alone(case):
    label, make, error, arg = case
    tensors, out = make()
    if out.layout == torch.strided:
        out.fill_(9.0) if out.dtype.is_floating_point else out.fill_(9)
    before = out.clone()
    kwargs = {"dtype": torch.float64} if label == "dtype vs out" else {}
    with pytest.raises(error, match=arg.replace("[", r"\[")):
        bucket_ops.flatten(tensors, out=out, **kwargs)
    assert torch.equal(out.to_dense(), before.to_dense())


def _bad_unflatten_calls():
    f = torch.randn
    base = torch.zeros(64)
    return [
        ("non-contiguous", lambda: (f(40), [torch.zeros(3), torch.zeros(4), torch.zeros(5, 4).t()]),
         ValueError, "tensors[2]"),
        ("mixed devices", lambda: (f(40), [torch.zeros(3), torch.empty(3, device="meta")]),
         ValueError, "tensors[1]"),
        ("mixed dtypes", lambda: (f(40), [torch.zeros(3), torch.zeros(3).double()]), TypeError,
         "tensors[1]"),
        ("integer out", lambda: (f(40), [torch.zeros(3), torch.zeros(3, dtype=torch.int64)]),
         TypeError, "tensors[1]"),
        ("flat too small", lambda: (f(5), [torch.zeros(3), torch.zeros(3)]), ValueError,
         "flat has 5"),
        ("flat dtype", lambda: (torch.arange(8), [torch.zeros(3)]), TypeError, "flat"),
        ("flat 2-D", lambda: (f(2, 4), [torch.zeros(3)]), ValueError, "flat must be 1-D"),
        ("aliases flat", lambda: (base[:20], [torch.zeros(3), base[5:9]]), ValueError,
         "tensors[1] shares memory with flat"),
        ("outs alias", lambda: (f(20), [base[0:4], torch.zeros(3), base[3:9]]), ValueError,
         r"tensors[0] and tensors[2] share memory"),
        ("sparse out", lambda: (f(20), [torch.zeros(3), torch.zeros(3).to_sparse()]), TypeError,
         "tensors[1]"),
    ]


@pytest.mark.parametrize("case", _bad_unflatten_calls(), ids=lambda c: c[0])
def test_unflatten_rejects_and_leaves_tensors_alone(case):
    _, make, error, arg = case
    flat, outs = make()
    for o in outs:
        if o.layout == torch.strided and o.device.type == "cpu":
            o.fill_(9)
    before = [o.clone() for o in outs]
    with pytest.raises(error, match=arg.replace("[", r"\[")):
        bucket_ops.unflatten(flat, outs)
    for o, b in zip(outs, before):
        if o.device.type == "cpu":
            assert torch.equal(o.to_dense(), b.to_dense())


# ---- opcheck: schema, autograd registration, FakeTensor, AOT dispatch ------------------------

def _opcheck_cases(device):
    def f(*shape, dtype=torch.float32, rg=False):
        return torch.randn(*shape, dtype=dtype, device=device).requires_grad_(rg)

    flat = lambda n, dtype=torch.float32: torch.randn(n, dtype=dtype, device=device)  # noqa: E731
    empty = lambda *s, dtype=torch.float32: torch.empty(*s, dtype=dtype, device=device)  # noqa
    ops = torch.ops.pycomm
    return [
        (ops.flatten.default, ([f(5), f(3, 4), f(0), f(7)],)),
        (ops.flatten.default, ([f(5, rg=True), f(3, 4, rg=True)], torch.bfloat16, 0.5)),
        (ops.flatten.default, ([f(9, dtype=torch.float16)], torch.float64, 3.0)),
        (ops.flatten.default, ([],)),
        (ops.flatten_into.default, ([f(5), f(3, 4)], empty(20, dtype=torch.half), 0.5)),
        (ops.flatten_into.default, ([f(5, rg=True)], empty(5))),
        (ops.flatten_into.default, ([], empty(3))),
        (ops.unflatten.default, (flat(24), [empty(5), empty(3, 4), empty(0), empty(7)])),
        (ops.unflatten.default,
         (flat(17, torch.bfloat16), [empty(5, dtype=torch.double), empty(3, 4, dtype=torch.double)],
          0.25)),
        (ops.unflatten.default, (flat(4), [])),
    ]


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device):
    for op, args in _opcheck_cases(device):
        torch.library.opcheck(op, args)


# ---- CUDA: the same values as the CPU kernels ------------------------------------------------

@cuda
@pytest.mark.gpu
@pytest.mark.parametrize("src,dst", PAIRS, ids=[f"{name(s)}->{name(d)}" for s, d in PAIRS])
def test_cuda_matches_cpu(src, dst, gen):
    # More tensors than fit in the kernel's parameters (the device-table path),
    # odd offsets (unaligned vectors), and tensors spanning several chunks.
    shapes = [(1,), (7,), (0,), (8,), (20000,), (3, 5)] * 30 + [((1 << 20) + 3,)]
    ts = [make_values(math.prod(s), src, gen).reshape(s) for s in shapes]
    for some in (ts[:5], ts):
        for scale in (1.0, 1 / 3):
            want = bucket_ops.flatten(some, dtype=dst, scale=scale)
            got = bucket_ops.flatten([t.cuda() for t in some], dtype=dst, scale=scale)
            assert_same_bits(got.cpu(), want)
            outs = [torch.empty_like(t, device="cuda") for t in some]
            bucket_ops.unflatten(got, outs, scale=2.0)
            want_outs = [torch.empty_like(t) for t in some]
            bucket_ops.unflatten(want, want_outs, scale=2.0)
            for o, w in zip(outs, want_outs):
                assert_same_bits(o.cpu(), w)


@cuda
@pytest.mark.gpu
def test_cuda_rejects_mixed_devices():
    with pytest.raises(ValueError, match=r"tensors\[1\]"):
        bucket_ops.flatten([torch.randn(3, device="cuda"), torch.randn(3)])
    flat = torch.randn(6, device="cuda")
    outs = [torch.zeros(3, device="cuda"), torch.zeros(3)]
    with pytest.raises(ValueError, match=r"tensors\[1\]"):
        bucket_ops.unflatten(flat, outs)
    assert not outs[0].any()
