"""embed_with_position against jaxnorm.reference: the forward for every dtype, odd half-widths,
leading shapes, per-token positions, the table form and scales; the table gradients against
jax.grad of the reference and their bitwise reproducibility; clamping; vmap, grad of vmap and jit;
the lowering; and bad arguments."""

import numpy as np
import pytest

import jax
import jax.numpy as jnp

import jaxnorm
from jaxnorm import reference

from cases import BF16, DTYPES, F16, F32

FLOATS = ["float32", "bfloat16", "float16"]
# Output tolerances: the float32 results differ from the reference's only by the sine/cosine
# implementations (a few float32 ulps of a value in [-1, 1]) and the rounding of the sum; a 16-bit
# result may then round the other way (one ulp of the output).
TOL = {F32: dict(rtol=2e-6, atol=2e-6), BF16: dict(rtol=8e-3, atol=8e-3), F16: dict(rtol=1e-3, atol=2e-3)}


def random_table(rng, vocab, d, dtype):
    return jnp.asarray(rng.normal(size=(vocab, d)), dtype)


def random_ids(rng, shape, vocab):
    return jnp.asarray(rng.integers(0, vocab, size=shape), jnp.int32)


def assert_close(got, want, dtype=None):
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, got.dtype, want.shape, want.dtype)
    tol = TOL[np.dtype(dtype or got.dtype)]
    np.testing.assert_allclose(np.asarray(got, np.float32), np.asarray(want, np.float32), **tol)


# ----------------------------------------------------------------------------------------------
# Forward


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("d", [2, 6, 64, 770])
def test_forward_matches_reference(dtype, d, rng):
    table = random_table(rng, 50, d, DTYPES[dtype])
    ids = random_ids(rng, (3, 7), 50)
    got = jax.jit(lambda i, t: jaxnorm.embed_with_position(i, t, position=5))(ids, table)
    want = reference.embed_with_position(ids, table, position=5)
    assert got.shape == (3, 7, d)
    assert_close(got, want)


@pytest.mark.parametrize("shape", [(), (1,), (11,), (2, 3, 4)])
def test_leading_shapes(shape, rng):
    table = random_table(rng, 20, 8, F32)
    ids = random_ids(rng, shape, 20)
    got = jaxnorm.embed_with_position(ids, table, position=3)
    assert got.shape == (*shape, 8)
    assert_close(got, reference.embed_with_position(ids, table, position=3))


@pytest.mark.parametrize("dtype", FLOATS)
def test_per_token_positions(dtype, rng):
    table = random_table(rng, 40, 24, DTYPES[dtype])
    ids = random_ids(rng, (4, 9), 40)
    for position in (jnp.arange(9), jnp.asarray(rng.integers(0, 5000, size=(4, 1))),
                     jnp.asarray(rng.integers(-100, 100000, size=(4, 9)), jnp.int32), jnp.int32(17)):
        got = jax.jit(lambda i, t, p: jaxnorm.embed_with_position(i, t, position=p))(ids, table, position)
        assert_close(got, reference.embed_with_position(ids, table, position=position))


def test_encoding_convention():
    """Zero table: the output is the encoding, sines then cosines, tensor2tensor's timescales."""
    d, pos = 8, 3
    out = jaxnorm.embed_with_position(jnp.zeros((1,), jnp.int32), jnp.zeros((1, d), F32), position=pos)
    inv = np.exp(-np.arange(d // 2) * np.log(10000.0) / (d // 2 - 1))
    want = np.concatenate([np.sin(pos * inv), np.cos(pos * inv)])
    np.testing.assert_allclose(np.asarray(out[0]), want, rtol=1e-6, atol=1e-6)


def test_large_positions_are_accurate(rng):
    # Accurate sinf/cosf: positions far past the fast approximations' range.
    table = random_table(rng, 8, 16, F32)
    ids = random_ids(rng, (64,), 8)
    pos = jnp.asarray(rng.integers(10**6, 10**7, size=64), jnp.int32)
    got = jaxnorm.embed_with_position(ids, table, position=pos, scale=0.0)
    want = reference.embed_with_position(ids, table, position=pos, scale=0.0)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=0, atol=2e-6)


@pytest.mark.parametrize("dtype", FLOATS)
def test_pos_table_form(dtype, rng):
    table = random_table(rng, 30, 12, DTYPES[dtype])
    pos_table = random_table(rng, 16, 12, DTYPES[dtype])
    ids = random_ids(rng, (5, 6), 30)
    position = jnp.asarray(rng.integers(0, 16, size=(5, 6)), jnp.int32)
    got = jax.jit(lambda i, t, p, pt: jaxnorm.embed_with_position(i, t, position=p, pos_table=pt))(
        ids, table, position, pos_table)
    assert_close(got, reference.embed_with_position(ids, table, position=position, pos_table=pos_table))


@pytest.mark.parametrize("scale", [None, 1.0, 0.5, -3.25])
def test_scale(scale, rng):
    table = random_table(rng, 10, 10, F32)
    ids = random_ids(rng, (6,), 10)
    got = jaxnorm.embed_with_position(ids, table, position=2, scale=scale)
    assert_close(got, reference.embed_with_position(ids, table, position=2, scale=scale))
    if scale is None:  # sqrt(d)
        assert_close(got, reference.embed_with_position(ids, table, position=2, scale=float(np.sqrt(10))))


def test_clamped_ids_and_positions(rng):
    table = random_table(rng, 10, 6, F32)
    pos_table = random_table(rng, 4, 6, F32)
    ids = jnp.array([-5, 0, 9, 10, 1000, -(2**31)], jnp.int32)
    got = jaxnorm.embed_with_position(ids, table, position=0)
    want = jaxnorm.embed_with_position(jnp.array([0, 0, 9, 9, 9, 0], jnp.int32), table, position=0)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    assert_close(got, reference.embed_with_position(ids, table, position=0))
    # int64 ids beyond int32 clamp before the cast (no wrap-around)
    big = jnp.array([2**40, -(2**40), 3], jnp.int64)
    got = jaxnorm.embed_with_position(big, table, position=0)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(
        jaxnorm.embed_with_position(jnp.array([9, 0, 3], jnp.int32), table, position=0)))
    # numpy int64 ids and positions clamp before jnp could narrow them (x64 off: by wrapping)
    for x64 in (True, False):
        with jax.enable_x64(x64):
            got = jaxnorm.embed_with_position(np.array([2**32 + 1, 2**40, 4], np.int64), table,
                                              position=np.array([2**32 + 2, 1, 2**35], np.int64), pos_table=pos_table)
            np.testing.assert_array_equal(np.asarray(got), np.asarray(jaxnorm.embed_with_position(
                jnp.array([9, 9, 4], jnp.int32), table, position=jnp.array([3, 1, 3], jnp.int32), pos_table=pos_table)))
    # positions clamp into the pos_table
    pos = jnp.array([-3, 0, 3, 4, 99, 2], jnp.int32)
    got = jaxnorm.embed_with_position(ids, table, position=pos, pos_table=pos_table)
    want = jaxnorm.embed_with_position(ids, table, position=jnp.clip(pos, 0, 3), pos_table=pos_table)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    assert_close(got, reference.embed_with_position(ids, table, position=pos, pos_table=pos_table))


def test_other_integer_dtypes(rng):
    table = random_table(rng, 12, 4, F32)
    ids = np.asarray(rng.integers(0, 12, size=(7,)))
    want = jaxnorm.embed_with_position(jnp.asarray(ids, jnp.int32), table, position=1)
    for dt in (jnp.int8, jnp.uint8, jnp.int16, jnp.uint32, jnp.int64):
        got = jaxnorm.embed_with_position(jnp.asarray(ids, dt), table, position=jnp.ones((7,), dt))
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_empty():
    table = jnp.ones((4, 6), F32)
    assert jaxnorm.embed_with_position(jnp.zeros((0, 3), jnp.int32), table, position=0).shape == (0, 3, 6)
    g = jax.grad(lambda t: jnp.sum(jaxnorm.embed_with_position(jnp.zeros((0,), jnp.int32), t, position=0)))(table)
    np.testing.assert_array_equal(np.asarray(g), 0)


# ----------------------------------------------------------------------------------------------
# Gradients


def _loss(fn, ids, position, ct, scale=None, with_pos_table=False):
    def loss(table, pos_table=None):
        out = fn(ids, table, position=position, scale=scale, pos_table=pos_table if with_pos_table else None)
        return jnp.sum(out.astype(jnp.float32) * ct)
    return loss


@pytest.mark.parametrize("scale", [None, 0.75])
def test_table_gradient_matches_reference(scale, rng):
    vocab, d = 23, 10
    table = random_table(rng, vocab, d, F32)
    ids = jnp.asarray(rng.integers(0, 8, size=(6, 9)), jnp.int32)  # many duplicates, absent rows
    ids = ids.at[0, :3].set(jnp.array([-4, 50, 22], jnp.int32))  # clamped ids take their gradient too
    ct = jnp.asarray(rng.normal(size=(6, 9, d)), F32)
    got = jax.jit(jax.grad(_loss(jaxnorm.embed_with_position, ids, 4, ct, scale)))(table)
    want = jax.grad(_loss(reference.embed_with_position, ids, 4, ct, scale))(table)
    assert got.dtype == table.dtype and got.shape == table.shape
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-5)
    absent = np.setdiff1d(np.arange(vocab), np.clip(np.asarray(ids), 0, vocab - 1))
    np.testing.assert_array_equal(np.asarray(got)[absent], 0)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_table_gradient_16bit(dtype, rng):
    """Sums in float32, rounded once: within one 16-bit ulp of the float32 gradient."""
    table = random_table(rng, 9, 8, DTYPES[dtype])
    ids = jnp.asarray(rng.integers(0, 9, size=(40,)), jnp.int32)
    ct = jnp.asarray(rng.normal(size=(40, 8)), F32)
    got = jax.grad(_loss(jaxnorm.embed_with_position, ids, 0, ct))(table)
    ct16 = ct.astype(DTYPES[dtype]).astype(F32)  # the cotangent as the op sees it
    want = jax.grad(_loss(reference.embed_with_position, ids, 0, ct16))(table.astype(F32))
    assert got.dtype == table.dtype
    assert_close(got, want.astype(DTYPES[dtype]))


def test_pos_table_gradient(rng):
    table, pos_table = random_table(rng, 11, 6, F32), random_table(rng, 7, 6, F32)
    ids = jnp.asarray(rng.integers(0, 11, size=(5, 8)), jnp.int32)
    position = jnp.asarray(rng.integers(-2, 9, size=(5, 8)), jnp.int32)
    ct = jnp.asarray(rng.normal(size=(5, 8, 6)), F32)
    got = jax.grad(_loss(jaxnorm.embed_with_position, ids, position, ct, 2.0, True), argnums=(0, 1))(table, pos_table)
    want = jax.grad(_loss(reference.embed_with_position, ids, position, ct, 2.0, True), argnums=(0, 1))(
        table, pos_table)
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-5, atol=1e-5)


def test_gradient_bitwise_reproducible(rng):
    vocab, d = 64, 96
    table = random_table(rng, vocab, d, BF16)
    ids = jnp.asarray(rng.integers(0, 4, size=(2048,)), jnp.int32)  # long runs of equal ids
    ct = jnp.asarray(rng.normal(size=(2048, d)), F32)
    g = jax.jit(jax.grad(_loss(jaxnorm.embed_with_position, ids, jnp.arange(2048), ct)))
    first = np.asarray(g(table)).tobytes()
    for _ in range(3):
        assert np.asarray(g(table)).tobytes() == first


def test_segment_sum_order(rng):
    """The run of each id is summed in token order (the stable sort keeps it)."""
    from jaxnorm.embedding import segment_sum_rows

    dout = jnp.asarray([[1e8], [1.0], [-1e8], [1.0]], F32)
    ids = jnp.zeros((4,), jnp.int32)
    g = segment_sum_rows(dout, ids, 2, 1.0)
    # ((1e8 + 1) - 1e8) + 1 in float32 = 1 (1e8 + 1 rounds to 1e8)
    np.testing.assert_array_equal(np.asarray(g), [[1.0], [0.0]])


# ----------------------------------------------------------------------------------------------
# Transformations


def test_vmap(rng):
    table = random_table(rng, 30, 16, BF16)
    ids = random_ids(rng, (4, 5, 3), 30)
    pos = jnp.asarray(rng.integers(0, 50, size=(4,)), jnp.int32)  # one position per example
    got = jax.jit(jax.vmap(lambda i, p: jaxnorm.embed_with_position(i, table, position=p)))(ids, pos)
    want = jnp.stack([jaxnorm.embed_with_position(ids[k], table, position=pos[k]) for k in range(4)])
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    # a non-leading axis, and a vmapped table (sequential)
    got = jax.vmap(lambda i: jaxnorm.embed_with_position(i, table, position=2), in_axes=1)(ids)
    want = jnp.stack([jaxnorm.embed_with_position(ids[:, k], table, position=2) for k in range(5)])
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    tables = random_table(rng, 3 * 30, 16, BF16).reshape(3, 30, 16)
    got = jax.vmap(lambda t: jaxnorm.embed_with_position(ids[0], t, position=1))(tables)
    want = jnp.stack([jaxnorm.embed_with_position(ids[0], t, position=1) for t in tables])
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_grad_of_vmap(rng):
    table, pos_table = random_table(rng, 13, 8, F32), random_table(rng, 6, 8, F32)
    ids = jnp.asarray(rng.integers(0, 13, size=(3, 10)), jnp.int32)
    pos = jnp.asarray(rng.integers(0, 6, size=(3, 10)), jnp.int32)
    w = jnp.asarray(rng.normal(size=(3, 10, 8)), F32)

    def loss(fn, table, pos_table):
        one = lambda i, p, w: jnp.sum(fn(i, table, position=p, pos_table=pos_table, scale=1.5) * w)
        return jnp.sum(jax.vmap(one)(ids, pos, w))

    got = jax.jit(jax.grad(lambda t, pt: loss(jaxnorm.embed_with_position, t, pt), argnums=(0, 1)))(table, pos_table)
    want = jax.grad(lambda t, pt: loss(reference.embed_with_position, t, pt), argnums=(0, 1))(table, pos_table)
    for g, w_ in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w_), rtol=1e-5, atol=1e-5)
    # per-example gradients (vmap of grad): the batched backward's folded launch
    per = jax.vmap(jax.grad(lambda t, i, w: jnp.sum(jaxnorm.embed_with_position(i, t, position=0) * w)),
                   in_axes=(None, 0, 0))(table, ids, w)
    ref = jnp.stack([jax.grad(lambda t: jnp.sum(reference.embed_with_position(ids[k], t, position=0) * w[k]))(table)
                     for k in range(3)])
    np.testing.assert_allclose(np.asarray(per), np.asarray(ref), rtol=1e-5, atol=1e-5)


def test_decoding_loop_with_scan(rng):
    table = random_table(rng, 17, 8, F32)
    tokens = random_ids(rng, (6, 4), 17)  # steps x batch

    def step(carry, ids_t):
        t = carry
        return t + 1, jaxnorm.embed_with_position(ids_t, table, position=t)

    _, got = jax.lax.scan(step, jnp.int32(0), tokens)
    want = jnp.stack([reference.embed_with_position(tokens[s], table, position=s) for s in range(6)])
    assert_close(got, want)


def test_lowered_hlo_holds_the_custom_calls(rng):
    table = random_table(rng, 10, 8, F32)
    ids = random_ids(rng, (4,), 10)
    f = lambda t: jnp.sum(jaxnorm.embed_with_position(ids, t, position=1))
    assert "@jaxnorm_embed_fwd" in jax.jit(f).lower(table).as_text()
    bwd = jax.jit(jax.value_and_grad(f)).lower(table).as_text()
    assert "@jaxnorm_embed_bwd" in bwd and "@jaxnorm_embed_fwd" in bwd


def test_bad_arguments():
    table = jnp.ones((10, 8), F32)
    ids = jnp.zeros((2, 3), jnp.int32)
    with pytest.raises(TypeError, match=r"ids.*integer.*float32.*\(2, 3\)"):
        jaxnorm.embed_with_position(jnp.zeros((2, 3), F32), table, position=0)
    with pytest.raises(TypeError, match="ids.*bool"):
        jaxnorm.embed_with_position(jnp.zeros((2,), bool), table, position=0)
    with pytest.raises(ValueError, match=r"table.*\[vocab, d\].*\(10, 8, 1\)"):
        jaxnorm.embed_with_position(ids, jnp.ones((10, 8, 1), F32), position=0)
    with pytest.raises(TypeError, match="table.*int32"):
        jaxnorm.embed_with_position(ids, jnp.ones((10, 8), jnp.int32), position=0)
    with pytest.raises(ValueError, match=r"table.*even.*\(10, 7\)"):
        jaxnorm.embed_with_position(ids, jnp.ones((10, 7), F32), position=0)
    with pytest.raises(ValueError, match=r"table.*no rows"):
        jaxnorm.embed_with_position(ids, jnp.ones((0, 8), F32), position=0)
    with pytest.raises(ValueError, match=r"pos_table.*\[max_pos, 8\].*\(5, 6\)"):
        jaxnorm.embed_with_position(ids, table, position=0, pos_table=jnp.ones((5, 6), F32))
    with pytest.raises(TypeError, match="pos_table.*float32.*bfloat16"):
        jaxnorm.embed_with_position(ids, table, position=0, pos_table=jnp.ones((5, 8), BF16))
    with pytest.raises(ValueError, match=r"position.*\(4,\).*\(2, 3\)"):
        jaxnorm.embed_with_position(ids, table, position=jnp.zeros((4,), jnp.int32))
    with pytest.raises(ValueError, match=r"position.*\(2, 3, 1\).*\(2, 3\)"):
        jaxnorm.embed_with_position(ids, table, position=jnp.zeros((2, 3, 1), jnp.int32))
    with pytest.raises(TypeError, match=r"position.*float32"):
        jaxnorm.embed_with_position(ids, table, position=jnp.zeros((3,), F32))
    with pytest.raises(TypeError, match="position"):
        jaxnorm.embed_with_position(ids, table, position=1.5)
    with pytest.raises(ValueError, match="position.*int32"):
        jaxnorm.embed_with_position(ids, table, position=2**40)
    with pytest.raises(TypeError, match="scale"):
        jaxnorm.embed_with_position(ids, table, position=0, scale=jnp.float32(2.0) + jnp.zeros(()))
    with pytest.raises(TypeError, match="position"):
        jaxnorm.embed_with_position(ids, table)  # position is required
    # raised at trace time, under jit
    with pytest.raises(ValueError, match="even"):
        jax.jit(lambda i, t: jaxnorm.embed_with_position(i, t, position=0)).lower(ids, jnp.ones((10, 7), F32))
