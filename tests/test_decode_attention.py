"""decode_attention against jaxnorm.reference (float64 on the inputs' exact values): every dtype,
head_dim and grouped-query ratio, both cache layouts, random lengths including 0 and the last
slot, the in-place append (the rest of the cache unchanged bit for bit), invalid lengths, the
split path of the CUDA kernel (long caches), vmap, the aliasing in the compiled HLO, and bad
arguments."""

import numpy as np
import pytest

import jax
import jax.numpy as jnp

import jaxnorm
from jaxnorm import reference
from jaxnorm.decode import decode_splits

FLOATS = ["float32", "bfloat16", "float16"]
# Output rounding of each dtype, plus float32 accumulation over up to a few thousand positions.
TOL = {"float32": 2e-5, "bfloat16": 1.6e-2, "float16": 2e-3}


def make(rng, batch, q_heads, kv_heads, max_len, head_dim, dtype, layout="BHLD", spread=1.0):
    dt = jnp.dtype(dtype)
    cache_shape = (batch, kv_heads, max_len, head_dim) if layout == "BHLD" else (batch, max_len, kv_heads, head_dim)
    q = jnp.asarray(rng.normal(size=(batch, q_heads, head_dim)) * spread, dt)
    k = jnp.asarray(rng.normal(size=cache_shape), dt)
    v = jnp.asarray(rng.normal(size=cache_shape) + 0.3, dt)
    kn = jnp.asarray(rng.normal(size=(batch, kv_heads, head_dim)), dt)
    vn = jnp.asarray(rng.normal(size=(batch, kv_heads, head_dim)), dt)
    return q, k, v, kn, vn


def random_lengths(rng, batch, top):
    """Lengths in [0, top], holding 0 and top when batch >= 3 (top: the largest valid length)."""
    lengths = rng.integers(0, top + 1, size=batch)
    if batch >= 3:
        lengths[rng.choice(batch, 2, replace=False)] = [0, top]
    return jnp.asarray(lengths, jnp.int32)


def f64(*xs):
    return [x.astype(jnp.float64) for x in xs]


def assert_close(got, want, dtype):
    want = np.asarray(want, np.float64)
    got = np.asarray(got.astype(jnp.float64))
    np.testing.assert_allclose(got, want, rtol=TOL[dtype], atol=TOL[dtype])


SHAPES = [  # batch, q_heads, kv_heads, max_len
    (4, 8, 8, 37),  # multi-head
    (3, 8, 2, 129),  # grouped 4
    (2, 16, 2, 64),  # grouped 8
    (1, 12, 1, 33),  # multi-query, a group of 12 (two CTAs per kv head on the GPU)
    (3, 4, 1, 1100),  # long enough that the GPU splits each sequence
]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("head_dim", [64, 128, 256])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_matches_reference(dtype, head_dim, shape, rng):
    batch, hq, hkv, max_len = shape
    q, k, v, _, _ = make(rng, batch, hq, hkv, max_len, head_dim, dtype)
    lengths = random_lengths(rng, batch, max_len)
    got = jax.jit(jaxnorm.decode_attention)(q, k, v, lengths)
    assert got.shape == q.shape and got.dtype == q.dtype
    assert_close(got, reference.decode_attention(*f64(q, k, v), lengths), dtype)


@pytest.mark.parametrize("layout", ["BHLD", "BLHD"])
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_append_in_place(layout, dtype, shape, rng):
    batch, hq, hkv, max_len = shape
    head_dim = 128
    q, k, v, kn, vn = make(rng, batch, hq, hkv, max_len, head_dim, dtype, layout)
    lengths = random_lengths(rng, batch, max_len - 1)
    step = jax.jit(lambda *a: jaxnorm.decode_attention(*a[:4], k_new=a[4], v_new=a[5], layout=layout))
    out, k2, v2 = step(q, k, v, lengths, kn, vn)
    want, wk, wv = reference.decode_attention(*f64(q, k, v), lengths, k_new=kn.astype(jnp.float64),
                                              v_new=vn.astype(jnp.float64), layout=layout)
    assert_close(out, want, dtype)
    # The caches: exactly the old ones with the new rows at lengths[b].
    np.testing.assert_array_equal(np.asarray(k2), np.asarray(wk.astype(k.dtype)))
    np.testing.assert_array_equal(np.asarray(v2), np.asarray(wv.astype(v.dtype)))


@pytest.mark.parametrize("layout", ["BHLD", "BLHD"])
def test_layouts_agree(layout, rng):
    q, k, v, _, _ = make(rng, 3, 8, 2, 300, 64, "float32", "BHLD")
    lengths = jnp.array([0, 150, 300], jnp.int32)
    want = jaxnorm.decode_attention(q, k, v, lengths)
    if layout == "BLHD":
        k, v = k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3)
    np.testing.assert_array_equal(np.asarray(jaxnorm.decode_attention(q, k, v, lengths, layout=layout)),
                                  np.asarray(want))


def test_invalid_lengths_give_nan_and_keep_the_cache(rng):
    q, k, v, kn, vn = make(rng, 4, 4, 2, 16, 64, "float32")
    lengths = jnp.array([-1, 16, 15, 17], jnp.int32)  # appending: only 15 is valid
    out, k2, v2 = jaxnorm.decode_attention(q, k, v, lengths, k_new=kn, v_new=vn)
    o = np.asarray(out)
    assert np.isnan(o[[0, 1, 3]]).all() and np.isfinite(o[2]).all()
    for b in (0, 1, 3):
        np.testing.assert_array_equal(np.asarray(k2[b]), np.asarray(k[b]))
        np.testing.assert_array_equal(np.asarray(v2[b]), np.asarray(v[b]))
    # Without appending, max_len itself is valid.
    o = np.asarray(jaxnorm.decode_attention(q, k, v, lengths))
    assert np.isnan(o[[0, 3]]).all() and np.isfinite(o[[1, 2]]).all()


def test_lengths_wider_than_int32_stay_out_of_range(rng):
    # 2^32 + 3 must not wrap to 3: the row is out of range (NaN, cache kept), in any integer dtype.
    # Numpy int64 also with x64 off, where jnp would narrow it to int32 by wrapping.
    q, k, v, kn, vn = make(rng, 3, 4, 2, 16, 64, "float32")
    for x64 in (True, False):
        with jax.enable_x64(x64):
            for lengths in (np.array([3, 2**32 + 3, -(2**40)], np.int64), jnp.array([3, 2**32 - 1, 2**31], jnp.uint32),
                            jnp.array([3, 200, 255], jnp.uint8)):
                out, k2, _ = jaxnorm.decode_attention(q, k, v, lengths, k_new=kn, v_new=vn)
                o = np.asarray(out)
                assert np.isfinite(o[0]).all() and np.isnan(o[1:]).all(), (lengths.dtype, x64)
                np.testing.assert_array_equal(np.asarray(k2[1:]), np.asarray(k[1:]))


def test_empty_sequence_gives_zeros_and_append_to_empty_gives_v_new(rng):
    q, k, v, kn, vn = make(rng, 2, 4, 2, 8, 64, "float32")
    lengths = jnp.zeros(2, jnp.int32)
    np.testing.assert_array_equal(np.asarray(jaxnorm.decode_attention(q, k, v, lengths)), 0.0)
    out, _, _ = jaxnorm.decode_attention(q, k, v, lengths, k_new=kn, v_new=vn)
    np.testing.assert_allclose(np.asarray(out), np.repeat(np.asarray(vn), 2, axis=1), rtol=1e-6)


def test_large_scores_do_not_overflow(rng):
    q, k, v, _, _ = make(rng, 2, 8, 2, 700, 128, "bfloat16", spread=40.0)  # scores in the hundreds
    lengths = jnp.array([700, 333], jnp.int32)
    got = jaxnorm.decode_attention(q, k, v, lengths)
    assert np.isfinite(np.asarray(got.astype(jnp.float32))).all()
    assert_close(got, reference.decode_attention(*f64(q, k, v), lengths), "bfloat16")


def test_reproducible(rng):
    q, k, v, _, _ = make(rng, 1, 32, 8, 5000, 128, "bfloat16")
    lengths = jnp.array([4999], jnp.int32)
    f = jax.jit(jaxnorm.decode_attention)
    a, b = f(q, k, v, lengths), f(q, k, v, lengths)
    np.testing.assert_array_equal(np.asarray(a.astype(jnp.float32)), np.asarray(b.astype(jnp.float32)))


def test_split_merge_repeats_in_a_loop(rng):
    # Long caches take the GPU's split path (partial states in a workspace, then their merge):
    # 24 steps of a loop, each with two calls of different shapes, must match the same calls
    # made one at a time, bit for bit (a merge that kept state between launches would not).
    q1, k1, v1, _, _ = make(rng, 1, 32, 8, 5000, 128, "bfloat16")
    q2, k2, v2, _, _ = make(rng, 2, 8, 2, 3000, 64, "float32")
    steps = 24

    def body(i, outs):
        o1 = jaxnorm.decode_attention(q1, k1, v1, jnp.array([4999], jnp.int32) - 7 * i)
        o2 = jaxnorm.decode_attention(q2, k2, v2, jnp.array([2999, 1500], jnp.int32) - 11 * i)
        return outs[0].at[i].set(o1), outs[1].at[i].set(o2)

    init = (jnp.zeros((steps, *q1.shape), q1.dtype), jnp.zeros((steps, *q2.shape), q2.dtype))
    got1, got2 = jax.jit(lambda: jax.lax.fori_loop(0, steps, body, init))()
    one = jax.jit(jaxnorm.decode_attention)
    for i in (0, 1, 11, steps - 1):
        want1 = one(q1, k1, v1, jnp.array([4999 - 7 * i], jnp.int32))
        want2 = one(q2, k2, v2, jnp.array([2999 - 11 * i, 1500 - 11 * i], jnp.int32))
        np.testing.assert_array_equal(np.asarray(got1[i].astype(jnp.float32)), np.asarray(want1.astype(jnp.float32)))
        np.testing.assert_array_equal(np.asarray(got2[i]), np.asarray(want2))
    assert_close(got2[steps - 1], reference.decode_attention(*f64(q2, k2, v2), jnp.array([2999, 1500]) - 11 * (steps - 1)),
                 "float32")


def test_vmap_matches_loop(rng):
    n = 3
    q, k, v, kn, vn = make(rng, 2 * n, 8, 2, 40, 64, "float32")
    lengths = jnp.asarray(rng.integers(0, 40, size=2 * n), jnp.int32)
    split = lambda x: x.reshape(n, 2, *x.shape[1:])  # noqa: E731
    step = lambda q, k, v, l, kn, vn: jaxnorm.decode_attention(q, k, v, l, k_new=kn, v_new=vn)  # noqa: E731
    got = jax.vmap(step)(*map(split, (q, k, v, lengths, kn, vn)))
    for i in range(n):
        want = step(*(split(x)[i] for x in (q, k, v, lengths, kn, vn)))
        for g, w in zip(got, want):
            np.testing.assert_array_equal(np.asarray(g[i]), np.asarray(w))
    # A shared (unbatched) cache with batched queries.
    got = jax.vmap(jaxnorm.decode_attention, in_axes=(0, None, None, None))(split(q), k[:2], v[:2], lengths[:2])
    for i in range(n):
        np.testing.assert_array_equal(np.asarray(got[i]), np.asarray(jaxnorm.decode_attention(split(q)[i], k[:2], v[:2], lengths[:2])))


def test_custom_call_and_aliasing_in_hlo(rng):
    q, k, v, kn, vn = make(rng, 2, 8, 2, 64, 128, "bfloat16")
    lengths = jnp.array([3, 60], jnp.int32)
    step = jax.jit(lambda q, k, v, l, kn, vn: jaxnorm.decode_attention(q, k, v, l, k_new=kn, v_new=vn),
                   donate_argnums=(1, 2))
    assert "jaxnorm_decode_attention_append" in step.lower(q, k, v, lengths, kn, vn).as_text()
    compiled = step.lower(q, k, v, lengths, kn, vn).compile().as_text()
    assert "output_to_operand_aliasing={{1}: (1, {}), {2}: (2, {})}" in compiled
    assert " copy(" not in compiled and "copy-start" not in compiled


def test_loop_updates_the_cache_without_copies(rng):
    """A decoding loop carrying donated caches through lax.fori_loop: no copy of a cache in the
    compiled program, and the same caches as appending step by step."""
    q, k, v, kn, vn = make(rng, 2, 8, 2, 32, 64, "float32")
    start = jnp.array([0, 5], jnp.int32)

    def loop(k, v, steps):
        def body(i, c):
            k, v = c
            _, k, v = jaxnorm.decode_attention(q, k, v, start + i, k_new=kn + i, v_new=vn - i)
            return k, v
        return jax.lax.fori_loop(0, steps, body, (k, v))

    f = jax.jit(loop, donate_argnums=(0, 1))
    text = f.lower(k, v, 4).compile().as_text()
    assert not [line for line in text.splitlines() if " copy(" in line and "f32[2,2,32,64]" in line]
    k_np, v_np = np.array(k), np.array(v)
    got_k, got_v = f(k, v, 4)
    for i in range(4):
        for b in range(2):
            k_np[b, :, int(start[b]) + i] = np.asarray(kn[b] + i)
            v_np[b, :, int(start[b]) + i] = np.asarray(vn[b] - i)
    np.testing.assert_array_equal(np.asarray(got_k), k_np)
    np.testing.assert_array_equal(np.asarray(got_v), v_np)


def test_splits_depend_on_shape_only():
    # The workspace's bound on the CUDA handler's splits (it picks one wave of resident CTAs).
    assert decode_splits(64, 8, 8192) == 2  # 512 CTAs unsplit: room for 1024
    assert decode_splits(1, 8, 131072) == 64  # capped
    assert decode_splits(1, 8, 4096) == 64  # 64 positions a split at least
    assert decode_splits(1, 8, 1000) == 16
    assert decode_splits(1, 1, 4096) == 64
    assert decode_splits(1, 8, 60) == 1  # shorter than one split
    assert decode_splits(256, 8, 8192) == 1  # 2048 CTAs already


def test_not_differentiable(rng):
    q, k, v, _, _ = make(rng, 1, 4, 2, 8, 64, "float32")
    with pytest.raises(NotImplementedError, match="forward-only"):
        jax.grad(lambda q: jaxnorm.decode_attention(q, k, v, jnp.array([4])).sum())(q)


@pytest.mark.parametrize("change,exc,match", [
    (dict(q=jnp.zeros((2, 8, 96), jnp.float32)), ValueError, "head_dim"),
    (dict(q=jnp.zeros((2, 8, 64), jnp.int32)), TypeError, "`q`"),
    (dict(q=jnp.zeros((2, 8), jnp.float32)), ValueError, r"\[batch, q_heads, head_dim\]"),
    (dict(k_cache=jnp.zeros((2, 2, 16, 64), jnp.bfloat16)), TypeError, "k_cache"),
    (dict(v_cache=jnp.zeros((2, 2, 15, 64), jnp.float32)), ValueError, "v_cache"),
    (dict(k_cache=jnp.zeros((2, 3, 16, 64), jnp.float32), v_cache=jnp.zeros((2, 3, 16, 64), jnp.float32)), ValueError, "divide"),
    (dict(k_cache=jnp.zeros((3, 2, 16, 64), jnp.float32), v_cache=jnp.zeros((3, 2, 16, 64), jnp.float32)), ValueError, "batch 2"),
    (dict(lengths=jnp.zeros((3,), jnp.int32)), ValueError, "lengths"),
    (dict(lengths=jnp.zeros((2,), jnp.float32)), TypeError, "lengths"),
    (dict(k_new=jnp.zeros((2, 2, 64), jnp.float32)), ValueError, "both"),
    (dict(k_new=jnp.zeros((2, 8, 64), jnp.float32), v_new=jnp.zeros((2, 8, 64), jnp.float32)), ValueError, "k_new"),
    (dict(k_new=jnp.zeros((2, 2, 64), jnp.bfloat16), v_new=jnp.zeros((2, 2, 64), jnp.float32)), TypeError,
     "`k_new` must have q's dtype float32, got bfloat16"),
    (dict(layout="BSHD"), ValueError, "layout"),
    (dict(scale="x"), TypeError, "scale"),
    (dict(scale=True), TypeError, "`scale` must be a Python float"),
    (dict(scale=float("inf")), ValueError, "`scale` must be finite"),
    (dict(scale=float("nan")), ValueError, "`scale` must be finite"),
    (dict(scale=-float("inf")), ValueError, "`scale` must be finite"),
])
def test_bad_arguments(change, exc, match):
    args = dict(q=jnp.zeros((2, 8, 64), jnp.float32), k_cache=jnp.zeros((2, 2, 16, 64), jnp.float32), v_cache=jnp.zeros((2, 2, 16, 64), jnp.float32),
                lengths=jnp.zeros((2,), jnp.int32))
    args.update(change)
    arrays = {k: v for k, v in args.items() if hasattr(v, "shape")}
    static = {k: v for k, v in args.items() if not hasattr(v, "shape")}
    with pytest.raises(exc, match=match):
        jax.jit(lambda a: jaxnorm.decode_attention(**a, **static)).lower(arrays)


def test_reference_reads_no_position_past_the_length():
    """The written spec attends to positions < lengths only: NaN or inf in the cache past them
    leaves the output finite (the kernels never read them), and a cache of max_len 0 attends to
    nothing."""
    q = jnp.ones((1, 2, 64), jnp.float32)
    cache = jnp.ones((1, 1, 4, 64), jnp.float32).at[0, 0, 3].set(jnp.nan)
    for fn in (reference.decode_attention, jaxnorm.decode_attention):
        assert np.isfinite(np.asarray(fn(q, cache.at[0, 0, 2].set(jnp.inf), cache, jnp.array([2])))).all(), fn
    empty = jnp.zeros((1, 1, 0, 64), jnp.float32)
    for fn in (reference.decode_attention, jaxnorm.decode_attention):
        np.testing.assert_array_equal(fn(q, empty, empty, jnp.array([0])), np.zeros((1, 2, 64)))
