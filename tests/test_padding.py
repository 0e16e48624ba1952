"""The padding family against jaxnorm.reference: the maps, every copy bit for bit (copies are
exact; the bias add rounds once, as the reference does), round trips, overflow, gradients and
forward-mode derivatives against the jnp reference's, vmap, the lowering, and bad arguments."""

import numpy as np
import pytest

import jax
import jax.numpy as jnp
from jax.experimental import checkify

import jaxnorm
from jaxnorm import reference

from cases import BF16, DTYPES, F16, F32

FLOATS = ["float32", "bfloat16", "float16"]


def random_lengths(rng, batch, max_len):
    """Lengths in [0, max_len], always holding an empty and a full sequence when batch >= 3."""
    lengths = rng.integers(0, max_len + 1, size=batch)
    if batch >= 3:
        lengths[rng.choice(batch, 2, replace=False)] = [0, max_len]
    return jnp.asarray(lengths, jnp.int32)


def capacity_for(lengths, how):
    """A capacity below, at or above the token count (never below 1)."""
    tokens = int(np.asarray(lengths).sum())
    return max(1, {"below": tokens * 2 // 3, "at": tokens, "above": tokens + 13}[how])


def random_array(rng, shape, dtype):
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return jnp.asarray(rng.random(shape) > 0.5)
    if jnp.issubdtype(dtype, jnp.integer):
        return jnp.asarray(rng.integers(-100, 100, size=shape), dtype)
    return jnp.asarray(rng.normal(size=shape) * 3 + 0.5, dtype)


def assert_same(a, b):
    assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, a.dtype, b.shape, b.dtype)
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def assert_offsets_equal(got, want):
    for name in jaxnorm.PaddingOffsets._fields:
        np.testing.assert_array_equal(np.asarray(getattr(got, name)), np.asarray(getattr(want, name)), err_msg=name)


# ----------------------------------------------------------------------------------------------
# The maps


@pytest.mark.parametrize("batch,max_len", [(1, 1), (5, 7), (16, 64), (33, 129)])
@pytest.mark.parametrize("how", ["below", "at", "above"])
def test_offsets_match_reference(batch, max_len, how, rng):
    lengths = random_lengths(rng, batch, max_len)
    capacity = capacity_for(lengths, how)
    got = jax.jit(jaxnorm.padding_offsets, static_argnums=(1, 2))(lengths, max_len, capacity)
    assert_offsets_equal(got, reference.padding_offsets(lengths, max_len, capacity))
    tokens = int(np.asarray(lengths).sum())
    assert int(got.tokens) == min(tokens, capacity)
    assert int(got.dropped) == max(0, tokens - capacity)
    assert bool(got.overflow) == (tokens > capacity)
    np.testing.assert_array_equal(np.asarray(got.cu_seqlens)[:-1], np.asarray(got.starts))


def test_offsets_clamp_lengths():
    lengths = jnp.array([-3, 9, 2, 4], jnp.int32)  # clamped to [0, 4, 2, 4]
    got = jaxnorm.padding_offsets(lengths, 4, 16)
    np.testing.assert_array_equal(np.asarray(got.lengths), [0, 4, 2, 4])
    assert int(got.tokens) == 10 and int(got.dropped) == 0
    assert_offsets_equal(got, reference.padding_offsets(lengths, 4, 16))


def test_offsets_lengths_of_other_integer_dtypes():
    # max_len does not fit a narrow dtype, and wide values do not fit int32: each clamps to
    # [0, max_len] as the value it is, never wrapped (int8 1000 would be -24; uint32 2^32 + 3, 3).
    # Numpy int64 arrays also with x64 off, where jnp would narrow them to int32 by wrapping.
    for x64 in (True, False):
        with jax.enable_x64(x64):
            cases = [(jnp.array([5, 7, -2], jnp.int8), 1000), (jnp.array([200, 250, 0], jnp.uint8), 300),
                     (jnp.array([3, 5, 40000], jnp.uint16), 100000), (jnp.array([3, 2**31 + 5, 9], jnp.uint32), 50),
                     (np.array([3, 2**32 + 3, -(2**40)], np.int64), 50), (np.array([3, 2**32 + 3, 7], np.uint64), 50)]
            for lengths, max_len in cases:
                want = np.clip(np.asarray(lengths).astype(np.float64), 0, max_len).astype(np.int32)
                got = jaxnorm.padding_offsets(lengths, max_len, 4 * max_len)
                np.testing.assert_array_equal(np.asarray(got.lengths), want, err_msg=f"{lengths.dtype} x64={x64}")
                assert int(got.tokens) == want.sum() and int(got.dropped) == 0
                assert_offsets_equal(got, reference.padding_offsets(jnp.asarray(want), max_len, 4 * max_len))


def test_offsets_many_sequences(rng):
    # More sequences than one pass of the offsets kernel's scan (1024 threads).
    lengths = random_lengths(rng, 3000, 5)
    for capacity in (int(np.asarray(lengths).sum()), 4000):
        assert_offsets_equal(jaxnorm.padding_offsets(lengths, 5, capacity),
                             reference.padding_offsets(lengths, 5, capacity))


def test_offsets_empty_batch():
    got = jaxnorm.padding_offsets(jnp.zeros((0,), jnp.int32), 4, 8)
    assert got.source.shape == (8,) and got.position.shape == (0, 4)
    assert np.all(np.asarray(got.source) == -1) and int(got.tokens) == 0 and int(got.dropped) == 0


# ----------------------------------------------------------------------------------------------
# remove_padding / rebuild_padding


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16", "int32", "int8", "bool", "float64"])
@pytest.mark.parametrize("trailing", [(), (1,), (3,), (7, 5), (96,), (12, 64)], ids=str)
def test_remove_and_rebuild_match_reference(dtype, trailing, rng):
    batch, max_len = 6, 11
    lengths = random_lengths(rng, batch, max_len)
    offsets = jaxnorm.padding_offsets(lengths, max_len, capacity_for(lengths, "above"))
    x = random_array(rng, (batch, max_len, *trailing), dtype)
    packed = jax.jit(jaxnorm.remove_padding)(x, offsets)
    assert_same(packed, reference.remove_padding(x, offsets))
    y = random_array(rng, packed.shape, dtype)
    assert_same(jax.jit(jaxnorm.rebuild_padding)(y, offsets), reference.rebuild_padding(y, offsets))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_remove_padding_copies_nothing_first(dtype):
    """The kernel reads x in place: the compiled program holds no copy of x's bytes (XLA's CPU
    compiler copied a 16-bit [B, 1, L, W] operand under a row-major constraint)."""
    x = jnp.zeros((4, 16, 8, 3), DTYPES[dtype])
    f = jax.jit(lambda x, l: jaxnorm.remove_padding(x, jaxnorm.padding_offsets(l, 16, 64)))
    hlo = f.lower(x, jnp.array([3, 16, 0, 9], jnp.int32)).compile().as_text()
    copies = [ln for ln in hlo.splitlines() if "copy" in ln.split("=")[-1].split("(")[0] and "[4,1,16,24]" in ln]
    assert not copies, copies


@pytest.mark.parametrize("how", ["below", "at", "above"])
def test_round_trip(how, rng):
    batch, max_len, hidden = 9, 40, 24
    lengths = random_lengths(rng, batch, max_len)
    offsets = jaxnorm.padding_offsets(lengths, max_len, capacity_for(lengths, how))
    x = random_array(rng, (batch, max_len, hidden), BF16)
    back = jaxnorm.rebuild_padding(jaxnorm.remove_padding(x, offsets), offsets)
    kept = np.asarray(offsets.position) >= 0
    want = np.where(kept[..., None], np.asarray(x), 0)
    np.testing.assert_array_equal(np.asarray(back), want)
    valid = np.arange(max_len)[None, :] < np.asarray(offsets.lengths)[:, None]
    if how != "below":  # nothing dropped: the round trip is exact at every valid position
        assert np.array_equal(kept, valid)
    else:
        assert kept.sum() == offsets.capacity < valid.sum()


def test_packed_rows_past_tokens_are_zero(rng):
    lengths = jnp.array([3, 0, 5], jnp.int32)
    offsets = jaxnorm.padding_offsets(lengths, 6, 12)
    x = random_array(rng, (3, 6, 8), F32) + 100.0  # no zeros in x
    packed = np.asarray(jaxnorm.remove_padding(x, offsets))
    assert np.all(packed[:8] != 0) and np.all(packed[8:] == 0)
    np.testing.assert_array_equal(packed[3:8], np.asarray(x)[2, :5])


# ----------------------------------------------------------------------------------------------
# Overflow


def test_overflow_drops_the_tail_and_says_so(rng):
    lengths = jnp.array([5, 7, 6], jnp.int32)  # 18 tokens
    offsets = jaxnorm.padding_offsets(lengths, 8, 10)
    assert int(offsets.tokens) == 10 and int(offsets.dropped) == 8 and bool(offsets.overflow)
    x = random_array(rng, (3, 8, 16), F32) + 100.0
    packed = np.asarray(jaxnorm.remove_padding(x, offsets))
    assert packed.shape == (10, 16)
    np.testing.assert_array_equal(packed, np.concatenate([np.asarray(x)[0, :5], np.asarray(x)[1, :5]]))
    back = np.asarray(jaxnorm.rebuild_padding(jnp.asarray(packed), offsets))
    np.testing.assert_array_equal(back[0, :5], np.asarray(x)[0, :5])
    np.testing.assert_array_equal(back[1, :5], np.asarray(x)[1, :5])
    assert np.all(back[1, 5:] == 0) and np.all(back[2] == 0)  # dropped tokens rebuild as zeros
    q, k, v = jaxnorm.add_qkv_bias_rebuild_padding(jnp.tile(jnp.asarray(packed), (1, 3)), None, offsets, 2)
    assert np.all(np.asarray(q)[2] == 0)


def test_check_capacity_with_checkify(rng):
    def layer(x, lengths):
        offsets = jaxnorm.padding_offsets(lengths, 8, 10)
        jaxnorm.check_capacity(offsets)
        return jaxnorm.remove_padding(x, offsets)

    checked = jax.jit(checkify.checkify(layer))
    x = random_array(rng, (3, 8, 4), F32)
    err, _ = checked(x, jnp.array([2, 3, 4], jnp.int32))
    err.throw()  # 9 tokens fit
    err, _ = checked(x, jnp.array([5, 7, 6], jnp.int32))
    with pytest.raises(checkify.JaxRuntimeError, match="8 tokens did not fit the capacity of 10"):
        err.throw()


# ----------------------------------------------------------------------------------------------
# The fused attention-layout copies


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("layout", ["BHLD", "BLHD"])
@pytest.mark.parametrize("heads,head_dim", [(2, 3), (3, 8), (12, 64)])
@pytest.mark.parametrize("form", ["fused", "three", "fused-nobias", "bias-3xHD"])
def test_qkv_rebuild_matches_reference(dtype, layout, heads, head_dim, form, rng):
    batch, max_len = 4, 13
    lengths = random_lengths(rng, batch, max_len)
    offsets = jaxnorm.padding_offsets(lengths, max_len, capacity_for(lengths, "above"))
    hidden = 3 * heads * head_dim
    qkv = random_array(rng, (offsets.capacity, hidden), DTYPES[dtype])
    bias = None if form == "fused-nobias" else random_array(rng, (hidden,), F32)
    arg = qkv
    if form == "three":
        arg = tuple(jnp.split(qkv, 3, axis=-1))
    passed_bias = bias.reshape(3, -1) if form == "bias-3xHD" else bias
    got = jax.jit(lambda a, b: jaxnorm.add_qkv_bias_rebuild_padding(a, b, offsets, heads, layout=layout))(
        arg, passed_bias)
    want = reference.add_qkv_bias_rebuild_padding(qkv, bias, offsets, heads, layout=layout)
    shape = (batch, heads, max_len, head_dim) if layout == "BHLD" else (batch, max_len, heads, head_dim)
    for g, w in zip(got, want):
        assert g.shape == shape
        assert_same(g, w)


@pytest.mark.parametrize("dtype", FLOATS + ["int32"])
@pytest.mark.parametrize("layout", ["BHLD", "BLHD"])
@pytest.mark.parametrize("heads,head_dim", [(1, 5), (4, 16), (12, 64)])
def test_transpose_remove_matches_reference(dtype, layout, heads, head_dim, rng):
    batch, max_len = 5, 17
    lengths = random_lengths(rng, batch, max_len)
    offsets = jaxnorm.padding_offsets(lengths, max_len, capacity_for(lengths, "at"))
    shape = (batch, heads, max_len, head_dim) if layout == "BHLD" else (batch, max_len, heads, head_dim)
    a = random_array(rng, shape, DTYPES.get(dtype, dtype))
    got = jax.jit(lambda a: jaxnorm.transpose_remove_padding(a, offsets, layout=layout))(a)
    assert_same(got, reference.transpose_remove_padding(a, offsets, layout=layout))


def test_qkv_then_transpose_is_the_identity_on_tokens(rng):
    """rebuild into BHLD then remove gives back each part's packed rows (FasterTransformer's pair)."""
    lengths = random_lengths(rng, 7, 20)
    offsets = jaxnorm.padding_offsets(lengths, 20, capacity_for(lengths, "at"))
    qkv = random_array(rng, (offsets.capacity, 3 * 4 * 8), BF16)
    for part, rows in zip(jaxnorm.add_qkv_bias_rebuild_padding(qkv, None, offsets, 4),
                          jnp.split(qkv, 3, axis=-1)):
        assert_same(jaxnorm.transpose_remove_padding(part, offsets), rows)


# ----------------------------------------------------------------------------------------------
# Differentiation: each op is linear; its VJP is the other copy (and a column sum for the bias).


def _ops(offsets, heads):
    """(name, jaxnorm fn, reference fn, input shapes) over one offsets."""
    b, l, c = offsets.batch, offsets.max_len, offsets.capacity
    hd = 8
    return [
        ("remove_padding", jaxnorm.remove_padding, reference.remove_padding, [(b, l, 5, 3)]),
        ("rebuild_padding", jaxnorm.rebuild_padding, reference.rebuild_padding, [(c, 10)]),
        ("qkv_bias", lambda q, bias, o: jaxnorm.add_qkv_bias_rebuild_padding(q, bias, o, heads),
         lambda q, bias, o: reference.add_qkv_bias_rebuild_padding(q, bias, o, heads),
         [(c, 3 * heads * hd), (3 * heads * hd,)]),
        ("qkv_blhd", lambda q, bias, o: jaxnorm.add_qkv_bias_rebuild_padding(q, bias, o, heads, layout="BLHD"),
         lambda q, bias, o: reference.add_qkv_bias_rebuild_padding(q, bias, o, heads, layout="BLHD"),
         [(c, 3 * heads * hd), (3 * heads * hd,)]),
        ("transpose_remove", jaxnorm.transpose_remove_padding, reference.transpose_remove_padding,
         [(b, heads, l, hd)]),
        ("transpose_remove_blhd", lambda a, o: jaxnorm.transpose_remove_padding(a, o, layout="BLHD"),
         lambda a, o: reference.transpose_remove_padding(a, o, layout="BLHD"), [(b, l, heads, hd)]),
    ]


def _loss(fn, offsets, cts):
    def loss(*args):
        outs = fn(*args, offsets)
        outs = outs if isinstance(outs, tuple) else (outs,)
        return sum(jnp.sum(o.astype(jnp.float32) * c) for o, c in zip(outs, cts))
    return loss


@pytest.mark.parametrize("how", ["below", "above"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_gradients_match_reference(how, dtype, rng):
    lengths = random_lengths(rng, 5, 9)
    offsets = jaxnorm.padding_offsets(lengths, 9, capacity_for(lengths, how))
    for name, fn, ref, shapes in _ops(offsets, heads=3):
        args = [random_array(rng, s, DTYPES[dtype] if i == 0 else F32) for i, s in enumerate(shapes)]
        outs = jax.eval_shape(lambda *a: ref(*a, offsets), *args)
        outs = outs if isinstance(outs, tuple) else (outs,)
        cts = [random_array(rng, o.shape, F32) for o in outs]
        argnums = tuple(range(len(args)))
        got = jax.jit(jax.grad(_loss(fn, offsets, cts), argnums=argnums))(*args)
        want = jax.grad(_loss(ref, offsets, cts), argnums=argnums)(*args)
        for i, (g, w) in enumerate(zip(got, want)):
            assert g.dtype == w.dtype and g.shape == w.shape, (name, i)
            if i == 0:  # data: a gather/scatter of unique positions, exact
                np.testing.assert_array_equal(np.asarray(g), np.asarray(w), err_msg=name)
            else:  # the bias: a float32 column sum of up to `capacity` values, summation order
                np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-5, atol=1e-5, err_msg=name)


def test_forward_mode_and_transpose(rng):
    lengths = random_lengths(rng, 4, 6)
    offsets = jaxnorm.padding_offsets(lengths, 6, capacity_for(lengths, "at"))
    x, t = random_array(rng, (4, 6, 5), F32), random_array(rng, (4, 6, 5), F32)
    y, dy = jax.jvp(lambda x: jaxnorm.remove_padding(x, offsets), (x,), (t,))
    assert_same(y, reference.remove_padding(x, offsets))
    assert_same(dy, reference.remove_padding(t, offsets))
    jac = jax.jacfwd(lambda x: jaxnorm.remove_padding(x, offsets))(x)
    assert jac.shape == (offsets.capacity, 5, 4, 6, 5)
    p = random_array(rng, (offsets.capacity, 5), F32)
    (back,) = jax.linear_transpose(lambda x: jaxnorm.remove_padding(x, offsets), x)(p)
    assert_same(back, reference.rebuild_padding(p, offsets))
    qkv, bias = random_array(rng, (offsets.capacity, 12), F32), random_array(rng, (12,), F32)
    tq, tb = random_array(rng, (offsets.capacity, 12), F32), random_array(rng, (12,), F32)
    _, douts = jax.jvp(lambda q, b: jaxnorm.add_qkv_bias_rebuild_padding(q, b, offsets, 2), (qkv, bias), (tq, tb))
    want = reference.add_qkv_bias_rebuild_padding(tq, tb, offsets, 2)
    for g, w in zip(douts, want):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-6, atol=1e-6)


def test_bias_gradient_bitwise_reproducible(rng):
    lengths = random_lengths(rng, 16, 64)
    offsets = jaxnorm.padding_offsets(lengths, 64, capacity_for(lengths, "above"))
    qkv = random_array(rng, (offsets.capacity, 3 * 4 * 32), BF16)
    bias = random_array(rng, (3 * 4 * 32,), F32)
    cts = [random_array(rng, (16, 4, 64, 32), F32) for _ in range(3)]
    g = jax.jit(jax.grad(lambda q, b: _loss(
        lambda q, b, o: jaxnorm.add_qkv_bias_rebuild_padding(q, b, o, 4), offsets, cts)(q, b), argnums=(0, 1)))
    first = [np.asarray(a).tobytes() for a in g(qkv, bias)]
    for _ in range(3):
        assert [np.asarray(a).tobytes() for a in g(qkv, bias)] == first


# ----------------------------------------------------------------------------------------------
# vmap


def test_vmap_over_batches_of_sequences(rng):
    n, batch, max_len, cap = 3, 4, 9, 20
    lengths = jnp.stack([random_lengths(rng, batch, max_len) for _ in range(n)])
    x = random_array(rng, (n, batch, max_len, 6), F32)

    def f(x, lengths):
        offsets = jaxnorm.padding_offsets(lengths, max_len, cap)
        packed = jaxnorm.remove_padding(x, offsets)
        q, k, v = jaxnorm.add_qkv_bias_rebuild_padding(jnp.tile(packed, (1, 3)), jnp.ones((18,)), offsets, 2)
        return packed, q, jaxnorm.transpose_remove_padding(v, offsets), offsets.dropped

    got = jax.jit(jax.vmap(f))(x, lengths)
    want = [f(x[i], lengths[i]) for i in range(n)]
    for j, g in enumerate(got):
        assert_same(g, jnp.stack([w[j] for w in want]))


def test_vmap_shared_offsets_and_non_leading_axis(rng):
    lengths = random_lengths(rng, 5, 7)
    offsets = jaxnorm.padding_offsets(lengths, 7, capacity_for(lengths, "below"))
    xs = random_array(rng, (5, 7, 3, 4), BF16)  # vmapped over axis 2
    got = jax.vmap(lambda x: jaxnorm.remove_padding(x, offsets), in_axes=2)(xs)
    want = jnp.stack([jaxnorm.remove_padding(xs[:, :, i], offsets) for i in range(3)])
    assert_same(got, want)
    ps = random_array(rng, (2, offsets.capacity, 6), BF16)
    got = jax.vmap(lambda p: jaxnorm.rebuild_padding(p, offsets))(ps)
    assert_same(got, jnp.stack([reference.rebuild_padding(p, offsets) for p in ps]))


def test_grad_of_vmap(rng):
    n, batch, max_len = 2, 3, 5
    lengths = jnp.stack([random_lengths(rng, batch, max_len) for _ in range(n)])
    qkv = random_array(rng, (n, 12, 3 * 2 * 4), F32)
    bias = random_array(rng, (3 * 2 * 4,), F32)
    w = random_array(rng, (n, batch, 2, max_len, 4), F32)

    def loss(fn, qkv, bias):
        def one(q, l, w):
            o = jaxnorm.padding_offsets(l, max_len, 12)
            return jnp.sum(fn(q, bias, o, 2)[1] * w)
        return jnp.sum(jax.vmap(one)(qkv, lengths, w))

    got = jax.grad(lambda q, b: loss(jaxnorm.add_qkv_bias_rebuild_padding, q, b), argnums=(0, 1))(qkv, bias)
    want = jax.grad(lambda q, b: loss(reference.add_qkv_bias_rebuild_padding, q, b), argnums=(0, 1))(qkv, bias)
    assert_same(got[0], want[0])
    np.testing.assert_allclose(np.asarray(got[1]), np.asarray(want[1]), rtol=1e-6, atol=1e-6)


# ----------------------------------------------------------------------------------------------
# Lowering and errors


def test_lowered_hlo_holds_the_custom_calls(rng):
    lengths = random_lengths(rng, 4, 8)
    x = random_array(rng, (4, 8, 12), F32)

    def layer(x, lengths):
        o = jaxnorm.padding_offsets(lengths, 8, 20)
        q, k, v = jaxnorm.add_qkv_bias_rebuild_padding(jnp.tile(jaxnorm.remove_padding(x, o), (1, 3)),
                                                       jnp.ones((36,)), o, 3)
        return jnp.sum(jaxnorm.rebuild_padding(jaxnorm.transpose_remove_padding(q + k + v, o), o))

    fwd = jax.jit(layer).lower(x, lengths).as_text()
    for t in ("jaxnorm_pad_offsets", "jaxnorm_pad_pack", "jaxnorm_pad_unpack3", "jaxnorm_pad_unpack"):
        assert f"@{t}" in fwd, t
    bwd = jax.jit(jax.grad(layer)).lower(x, lengths).as_text()
    assert "@jaxnorm_pad_pack3" in bwd  # the transpose of the fused QKV rebuild


def test_bad_arguments(rng):
    lengths = jnp.array([2, 3], jnp.int32)
    with pytest.raises(TypeError, match="lengths.*integer"):
        jaxnorm.padding_offsets(jnp.array([2.0, 3.0]), 4, 8)
    with pytest.raises(ValueError, match=r"lengths.*\[batch\].*\(2, 1\)"):
        jaxnorm.padding_offsets(lengths[:, None], 4, 8)
    with pytest.raises(ValueError, match="capacity.*positive"):
        jaxnorm.padding_offsets(lengths, 4, 0)
    with pytest.raises(TypeError, match="capacity.*int"):
        jaxnorm.padding_offsets(lengths, 4, 8.0)
    with pytest.raises(TypeError, match="capacity.*int"):
        jaxnorm.padding_offsets(lengths, 4, jnp.int32(8))
    with pytest.raises(TypeError, match="max_len"):
        jaxnorm.padding_offsets(lengths, True, 8)
    with pytest.raises(ValueError, match="max_len"):
        jaxnorm.padding_offsets(lengths, -1, 8)
    o = jaxnorm.padding_offsets(lengths, 4, 8)
    with pytest.raises(ValueError, match=r"x.*\[2, 4, \.\.\.\].*\(2, 5, 3\)"):
        jaxnorm.remove_padding(jnp.ones((2, 5, 3), F32), o)
    with pytest.raises(TypeError, match="offsets"):
        jaxnorm.remove_padding(jnp.ones((2, 4, 3), F32), (o.source, o.position))
    with pytest.raises(ValueError, match=r"packed.*\[8, \.\.\.\].*\(7, 3\)"):
        jaxnorm.rebuild_padding(jnp.ones((7, 3), F32), o)
    with pytest.raises(ValueError, match="not 3 \\* num_heads \\* head_dim"):
        jaxnorm.add_qkv_bias_rebuild_padding(jnp.ones((8, 30), F32), None, o, 4)
    with pytest.raises(ValueError, match="num_heads"):
        jaxnorm.add_qkv_bias_rebuild_padding(jnp.ones((8, 30), F32), None, o, 0)
    with pytest.raises(ValueError, match="bias.*\\[30\\]"):
        jaxnorm.add_qkv_bias_rebuild_padding(jnp.ones((8, 30), F32), jnp.ones((29,), F32), o, 5)
    with pytest.raises(TypeError, match="bias"):
        jaxnorm.add_qkv_bias_rebuild_padding(jnp.ones((8, 30), jnp.int32), jnp.ones((30,), F32), o, 5)
    with pytest.raises(ValueError, match="three arrays"):
        jaxnorm.add_qkv_bias_rebuild_padding((jnp.ones((8, 10), F32),) * 2, None, o, 5)
    with pytest.raises(ValueError, match="share one shape"):
        jaxnorm.add_qkv_bias_rebuild_padding((jnp.ones((8, 10), F32), jnp.ones((8, 10), F32), jnp.ones((8, 5), F32)), None, o, 5)
    with pytest.raises(TypeError, match="share one dtype"):
        jaxnorm.add_qkv_bias_rebuild_padding((jnp.ones((8, 10), F32), jnp.ones((8, 10), BF16), jnp.ones((8, 10), F32)), None, o, 5)
    with pytest.raises(ValueError, match="capacity 8"):
        jaxnorm.add_qkv_bias_rebuild_padding(jnp.ones((9, 30), F32), None, o, 5)
    with pytest.raises(ValueError, match="layout"):
        jaxnorm.add_qkv_bias_rebuild_padding(jnp.ones((8, 30), F32), None, o, 5, layout="BTHD")
    with pytest.raises(ValueError, match=r"attn_out.*\(2, 3, 5, 8\)"):
        jaxnorm.transpose_remove_padding(jnp.ones((2, 3, 5, 8), F32), o)
    with pytest.raises(TypeError, match="attn_out"):
        jaxnorm.transpose_remove_padding(jnp.ones((2, 3, 4, 8), jnp.int4), o)


def test_stray_map_values_read_as_padding(rng):
    """A PaddingOffsets built or edited by hand: map values past the arrays they index (a packed
    row >= capacity in `position`, a padded position >= batch * max_len in `source`) are taken
    as -1, a zero row, in every kernel that reads through a map (the CPU handler had read out of
    bounds and crashed)."""
    batch, max_len, capacity, heads, head_dim = 2, 4, 6, 2, 8
    off = jaxnorm.padding_offsets(jnp.array([3, 4]), max_len, capacity)
    stray_source = off.source.at[1].set(10**8).at[2].set(batch * max_len)
    stray_position = off.position.at[0, 1].set(10**8).at[1, 0].set(capacity)
    x = jnp.asarray(rng.normal(size=(batch, max_len, heads * head_dim)), F32)
    packed = jnp.asarray(rng.normal(size=(capacity, heads * head_dim)), F32)
    qkv = jnp.asarray(rng.normal(size=(capacity, 3 * heads * head_dim)), F32)
    bias = jnp.asarray(rng.normal(size=(3 * heads * head_dim,)), F32)

    def as_padding(o, name, where):  # the same maps with -1 at the stray entries
        m = getattr(o, name)
        return o._replace(**{name: m.at[where].set(-1)})

    src = off._replace(source=stray_source)
    want = jaxnorm.remove_padding(x, as_padding(src, "source", jnp.array([1, 2])))
    np.testing.assert_array_equal(jaxnorm.remove_padding(x, src), want)
    assert not np.asarray(want[1:3]).any()
    attn = jnp.asarray(rng.normal(size=(batch, heads, max_len, head_dim)), F32)
    np.testing.assert_array_equal(jaxnorm.transpose_remove_padding(attn, src),
                                  jaxnorm.transpose_remove_padding(attn, as_padding(src, "source", jnp.array([1, 2]))))

    pos = off._replace(position=stray_position)
    fixed = off._replace(position=off.position.at[0, 1].set(-1).at[1, 0].set(-1))
    got = jaxnorm.rebuild_padding(packed, pos)
    np.testing.assert_array_equal(got, jaxnorm.rebuild_padding(packed, fixed))
    assert not np.asarray(got[0, 1]).any() and not np.asarray(got[1, 0]).any()
    for b in (None, bias):
        np.testing.assert_array_equal(jaxnorm.add_qkv_bias_rebuild_padding(qkv, b, pos, heads),
                                      jaxnorm.add_qkv_bias_rebuild_padding(qkv, b, fixed, heads))


def test_reference_takes_empty_trailing_axes():
    off = jaxnorm.padding_offsets(jnp.array([1, 2]), 3, 4)
    x = jnp.zeros((2, 3, 0), F32)
    assert reference.remove_padding(x, off).shape == jaxnorm.remove_padding(x, off).shape == (4, 0)
