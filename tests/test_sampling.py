"""The sampling family against jaxnorm.reference: exact filters (bit for bit), sampled
frequencies by chi-square against the exact distribution, top_k against lax.top_k, the key
contract, the lowering, and bad arguments."""

import math

import numpy as np
import pytest

import jax
import jax.numpy as jnp

import jaxnorm
from jaxnorm import reference

from cases import BF16, DTYPES, F16, F32

FILTERS = [
    dict(),
    dict(top_k=5),
    dict(top_p=0.7),
    dict(min_p=0.05),
    dict(top_k=9, top_p=0.6),
    dict(top_k=20, top_p=0.9, min_p=0.01),
    dict(top_k=1),
    dict(top_p=0.01),
]


def logits_of(rng, shape, dtype, scale=3.0):
    return jnp.asarray(scale * rng.normal(size=shape), dtype)


def same_filtered(a, b):
    a, b = np.asarray(a.astype(jnp.float32)), np.asarray(b.astype(jnp.float32))
    return np.array_equal(a, b)


# ----------------------------------------------------------------------------------------------
# Filters: exact


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("vocab", [1, 7, 64, 1000, 4099])
@pytest.mark.parametrize("kw", FILTERS, ids=str)
def test_filter_matches_reference(dtype, vocab, kw, rng):
    x = logits_of(rng, (3, 5, vocab), DTYPES[dtype])
    got = jax.jit(lambda x: jaxnorm.filter_logits(x, **kw))(x)
    want = reference.filter_logits(x, **kw)
    assert got.dtype == x.dtype and got.shape == x.shape
    assert same_filtered(got, want)


@pytest.mark.wide(cpu=True)
@pytest.mark.parametrize("vocab", [32000, 128256, 151936])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_filter_wide_rows(vocab, dtype, rng):
    x = logits_of(rng, (4, vocab), DTYPES[dtype])
    kw = dict(top_k=jnp.array([50, 0, 1000, 7]), top_p=jnp.array([0.9, 0.95, 1.0, 0.5]), min_p=0.001)
    assert same_filtered(jaxnorm.filter_logits(x, **kw), reference.filter_logits(x, **kw))


def test_filter_per_row_params_and_axis(rng):
    x = logits_of(rng, (40, 6, 3), F32)  # vocabulary on axis 0
    k = jnp.asarray(rng.integers(0, 45, size=(6, 3)), jnp.int32)
    p = jnp.asarray(rng.uniform(0.05, 1.0, size=(6, 3)), jnp.float32)
    got = jaxnorm.filter_logits(x, top_k=k, top_p=p, axis=0)
    want = reference.filter_logits(x, top_k=k, top_p=p, axis=0)
    assert same_filtered(got, want)


def test_filter_ties_kept(rng):
    x = jnp.asarray(rng.integers(-3, 4, size=(8, 50)), jnp.float32)  # many equal logits
    for kw in (dict(top_k=4), dict(top_p=0.5), dict(top_k=10, top_p=0.3)):
        assert same_filtered(jaxnorm.filter_logits(x, **kw), reference.filter_logits(x, **kw))


def test_filter_nonfinite():
    x = jnp.array([
        [1.0, jnp.nan, 3.0, -jnp.inf, 2.0],
        [-jnp.inf] * 5,
        [jnp.nan] * 5,
        [0.0, jnp.inf, 1.0, jnp.inf, jnp.nan],
    ], jnp.float32)
    assert same_filtered(jaxnorm.filter_logits(x), reference.filter_logits(x))  # NaN out as -inf
    assert not np.any(np.isnan(np.asarray(jaxnorm.filter_logits(x))))
    got = jaxnorm.filter_logits(x, top_k=2)
    assert same_filtered(got, reference.filter_logits(x, top_k=2))
    np.testing.assert_array_equal(np.isfinite(np.asarray(got[0])), [False, False, True, False, True])
    assert np.all(np.asarray(got[1:3]) == -np.inf)
    np.testing.assert_array_equal(np.asarray(got[3]), [-np.inf, np.inf, -np.inf, np.inf, -np.inf])


# ----------------------------------------------------------------------------------------------
# Sampling: the exact distribution


def chi2_critical(df, z=4.265):
    """Wilson-Hilferty: the chi-square quantile at the normal quantile z (4.265: p = 1e-5)."""
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


def assert_distribution(tokens, probs):
    """tokens: draws from one row's distribution `probs` (float64). No draw outside its support,
    and a chi-square test of the frequencies (bins with expected count < 5 merged)."""
    tokens = np.asarray(tokens).reshape(-1)
    n = tokens.size
    assert tokens.min() >= 0
    counts = np.bincount(tokens, minlength=probs.size)
    assert np.all(counts[probs == 0] == 0), "a token outside the filter was drawn"
    exp = n * probs
    big = exp >= 5
    obs_b, exp_b = list(counts[big]), list(exp[big])
    if exp[~big].sum() > 0:
        obs_b.append(counts[~big].sum())
        exp_b.append(exp[~big].sum())
    obs_b, exp_b = np.array(obs_b, float), np.array(exp_b)
    if len(exp_b) < 2:
        return
    stat = float(np.sum((obs_b - exp_b) ** 2 / exp_b))
    assert stat < chi2_critical(len(exp_b) - 1), (stat, len(exp_b) - 1, obs_b, exp_b)


N_DRAWS = 40000


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("kw", FILTERS + [dict(temperature=0.5, top_p=0.9), dict(temperature=2.5, top_k=10)], ids=str)
def test_sample_frequencies(dtype, kw, rng):
    vocab = 24
    row = logits_of(rng, (vocab,), DTYPES[dtype], scale=1.5)
    x = jnp.broadcast_to(row, (N_DRAWS, vocab))  # one key: each row its own stream (row counter)
    tokens = jax.jit(lambda k, x: jaxnorm.sample(k, x, **kw))(jax.random.key(int(rng.integers(1 << 30))), x)
    probs = np.asarray(reference.sampling_probs(row, **kw), np.float64)
    assert_distribution(tokens, probs)


def test_sample_per_row_params(rng):
    vocab, groups = 16, 4
    rows = logits_of(rng, (groups, vocab), F32, scale=1.5)
    t = jnp.array([1.0, 0.7, 1.3, 1.0])
    k = jnp.array([0, 3, 8, 5], jnp.int32)
    p = jnp.array([0.8, 1.0, 0.6, 0.9])
    m = jnp.array([0.0, 0.0, 0.02, 0.1])
    reps = N_DRAWS // 4
    x = jnp.repeat(rows, reps, axis=0)
    rep = lambda a: jnp.repeat(a, reps)  # noqa: E731
    tokens = jaxnorm.sample(jax.random.key(int(rng.integers(1 << 30))), x, temperature=rep(t), top_k=rep(k),
                            top_p=rep(p), min_p=rep(m))
    for g in range(groups):
        probs = reference.sampling_probs(rows[g], temperature=t[g], top_k=k[g], top_p=p[g], min_p=m[g])
        assert_distribution(tokens[g * reps:(g + 1) * reps], np.asarray(probs, np.float64))


@pytest.mark.wide(cpu=True)
@pytest.mark.parametrize("vocab", [128256])
def test_sample_wide_rows_support(vocab, rng):
    """Wide rows (cluster paths on a GPU): every draw lies in the reference's kept set."""
    x = logits_of(rng, (64, vocab), F32)
    for kw in (dict(top_k=50), dict(top_p=0.9), dict(top_k=50, top_p=0.9), dict(min_p=0.1)):
        tok = np.asarray(jaxnorm.sample(jax.random.key(1), x, **kw))
        keep = np.asarray(reference.sampling_mask(x, **kw))
        assert np.all(keep[np.arange(64), tok]), kw


def test_greedy_lowest_index_on_ties(rng):
    x = jnp.asarray(rng.integers(0, 3, size=(50, 9)), jnp.float32)
    got = jaxnorm.sample(jax.random.key(0), x, temperature=0.0, top_k=2)
    np.testing.assert_array_equal(np.asarray(got), np.argmax(np.asarray(x), axis=-1))
    # a per-row temperature of 0 is greedy for that row only
    t = jnp.array([0.0, 1.0] * 25)
    got = jaxnorm.sample(jax.random.key(0), x, temperature=t)
    np.testing.assert_array_equal(np.asarray(got)[::2], np.argmax(np.asarray(x), axis=-1)[::2])


def test_sample_nonfinite():
    x = jnp.array([
        [jnp.nan, 1.0, -jnp.inf, jnp.nan],
        [-jnp.inf] * 4,
        [jnp.nan] * 4,
        [0.0, jnp.inf, 5.0, jnp.nan],
    ], jnp.float32)
    tok = np.asarray(jax.vmap(lambda k: jaxnorm.sample(k, x))(jax.random.split(jax.random.key(3), 200)))
    assert np.all(tok[:, 0] == 1)
    assert np.all(tok[:, 1] == -1) and np.all(tok[:, 2] == -1)
    assert np.all(tok[:, 3] == 1)


def test_edge_shapes(rng):
    key = jax.random.key(0)
    assert jaxnorm.sample(key, jnp.zeros((0, 7), F32)).shape == (0,)
    assert jaxnorm.sample(key, logits_of(rng, (3, 0, 7), F32)).shape == (3, 0)
    one = jaxnorm.sample(key, logits_of(rng, (5, 1), F32), top_k=1, top_p=0.5)
    np.testing.assert_array_equal(np.asarray(one), 0)
    x = logits_of(rng, (6, 10), F32)
    assert np.all(np.asarray(jaxnorm.sample(key, x, top_k=10)) >= 0)   # k = vocabulary: off
    assert np.all(np.asarray(jaxnorm.sample(key, x, top_k=99)) >= 0)
    assert same_filtered(jaxnorm.filter_logits(x, top_p=1.0), x)
    assert jaxnorm.sample(key, logits_of(rng, (10,), F32)).shape == ()


# ----------------------------------------------------------------------------------------------
# Randomness contract


def test_same_key_same_tokens(rng):
    x = logits_of(rng, (32, 300), F32)
    f = jax.jit(lambda k, x: jaxnorm.sample(k, x, top_p=0.95))
    a, b = f(jax.random.key(7), x), f(jax.random.key(7), x)
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    c = f(jax.random.key(8), x)
    assert np.mean(np.asarray(a) == np.asarray(c)) < 0.5


def test_per_row_keys_independent_of_batch(rng):
    x = logits_of(rng, (12, 300), F32)
    keys = jax.random.split(jax.random.key(11), 12)
    whole = np.asarray(jaxnorm.sample(keys, x, top_k=40))
    for i in (0, 5, 11):
        assert int(jaxnorm.sample(keys[i], x[i], top_k=40)) == whole[i]
    sub = np.asarray(jaxnorm.sample(keys[3:9], x[3:9], top_k=40))
    np.testing.assert_array_equal(sub, whole[3:9])
    # vmap over keys and logits is the same as per-row keys
    np.testing.assert_array_equal(np.asarray(jax.vmap(lambda k, r: jaxnorm.sample(k, r, top_k=40))(keys, x)), whole)


def test_raw_uint32_keys(rng):
    x = logits_of(rng, (8, 50), F32)
    raw = jax.random.PRNGKey(5)
    typed = jax.random.wrap_key_data(raw)
    np.testing.assert_array_equal(np.asarray(jaxnorm.sample(raw, x)), np.asarray(jaxnorm.sample(typed, x)))


def test_vmap_single_key_matches_loop(rng):
    xs = logits_of(rng, (3, 4, 60), F32)
    key = jax.random.key(2)
    batched = jax.vmap(lambda x: jaxnorm.sample(key, x, top_p=0.8))(xs)
    for i in range(3):
        np.testing.assert_array_equal(np.asarray(batched[i]), np.asarray(jaxnorm.sample(key, xs[i], top_p=0.8)))


# ----------------------------------------------------------------------------------------------
# top_k


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("shape,k", [((5, 100), 1), ((3, 4, 100), 7), ((2, 100), 100), ((6, 3000), 64), ((1, 9), 9)])
def test_top_k_matches_lax(dtype, shape, k, rng):
    x = logits_of(rng, shape, DTYPES[dtype])
    v, i = jax.jit(lambda x: jaxnorm.top_k(x, k))(x)
    lv, li = jax.lax.top_k(x, k)
    np.testing.assert_array_equal(np.asarray(i), np.asarray(li))
    assert v.dtype == x.dtype and same_filtered(v, lv)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_top_k_ties_and_specials(dtype, rng):
    x = jnp.asarray(rng.integers(-2, 3, size=(6, 200)), DTYPES[dtype])  # ties everywhere
    for k in (1, 5, 70, 200):
        np.testing.assert_array_equal(np.asarray(jaxnorm.top_k(x, k)[1]), np.asarray(jax.lax.top_k(x, k)[1]))
    s = jnp.array([[1.0, jnp.nan, 3.0, jnp.inf, -jnp.nan, 3.0, -0.0, 0.0, -jnp.inf]], DTYPES[dtype])
    np.testing.assert_array_equal(np.asarray(jaxnorm.top_k(s, 9)[1]), np.asarray(jax.lax.top_k(s, 9)[1]))


@pytest.mark.wide
@pytest.mark.parametrize("shape,k", [((4, 128256), 50), ((4, 128256), 1024), ((2, 1 << 20), 50), ((3, 151936), 2048)])
def test_top_k_wide(shape, k, rng):
    x = logits_of(rng, shape, F32)
    np.testing.assert_array_equal(np.asarray(jaxnorm.top_k(x, k)[1]), np.asarray(jax.lax.top_k(x, k)[1]))
    xt = jnp.round(x)  # a row full of ties: the index phase of the select
    np.testing.assert_array_equal(np.asarray(jaxnorm.top_k(xt, k)[1]), np.asarray(jax.lax.top_k(xt, k)[1]))


def test_top_k_vmap_and_grad(rng):
    x = logits_of(rng, (4, 3, 80), F32)
    v, i = jax.vmap(lambda r: jaxnorm.top_k(r, 6))(x)
    lv, li = jax.lax.top_k(x, 6)
    np.testing.assert_array_equal(np.asarray(i), np.asarray(li))
    ct = logits_of(rng, (4, 3, 6), F32)
    g = jax.grad(lambda x: jnp.sum(jaxnorm.top_k(x, 6)[0] * ct))(x)
    lg = jax.grad(lambda x: jnp.sum(jax.lax.top_k(x, 6)[0] * ct))(x)
    np.testing.assert_array_equal(np.asarray(g), np.asarray(lg))


def test_top_k_large_k_delegates(rng):
    x = logits_of(rng, (2, 3000), F32)
    v, i = jaxnorm.top_k(x, 2500)
    np.testing.assert_array_equal(np.asarray(i), np.asarray(jax.lax.top_k(x, 2500)[1]))


# ----------------------------------------------------------------------------------------------
# Lowering and errors


def test_lowered_hlo_holds_the_custom_calls(rng):
    x = logits_of(rng, (4, 100), F32)
    key = jax.random.key(0)
    assert "jaxnorm_sample" in jax.jit(lambda k, x: jaxnorm.sample(k, x, top_k=5)).lower(key, x).as_text()
    assert "jaxnorm_filter" in jax.jit(lambda x: jaxnorm.filter_logits(x, top_p=0.5)).lower(x).as_text()
    assert "jaxnorm_top_k" in jax.jit(lambda x: jaxnorm.top_k(x, 5)).lower(x).as_text()


@pytest.mark.parametrize("kw,err,match", [
    (dict(top_p=0.0), ValueError, "top_p"),
    (dict(top_p=1.5), ValueError, "top_p"),
    (dict(top_k=-1), ValueError, "top_k"),
    (dict(top_k=2.5), TypeError, "top_k"),
    (dict(min_p=-0.1), ValueError, "min_p"),
    (dict(temperature=-1.0), ValueError, "temperature"),
    (dict(top_k=jnp.ones((3,), jnp.int32)), ValueError, "batch shape"),
    (dict(top_k=jnp.ones((4,), jnp.float32)), TypeError, "top_k"),
    (dict(axis=2), ValueError, "axis"),
])
def test_sample_bad_arguments(kw, err, match):
    x = jnp.ones((4, 10), F32)
    with pytest.raises(err, match=match):
        jaxnorm.sample(jax.random.key(0), x, **kw)


def test_bad_keys_and_logits():
    x = jnp.ones((4, 10), F32)
    with pytest.raises(TypeError, match="key"):
        jaxnorm.sample(0, x)
    with pytest.raises(TypeError, match="key"):
        jaxnorm.sample(jnp.ones((2,), jnp.float32), x)
    with pytest.raises(ValueError, match="one key per row"):
        jaxnorm.sample(jax.random.split(jax.random.key(0), 3), x)
    with pytest.raises(TypeError, match="logits"):
        jaxnorm.sample(jax.random.key(0), jnp.ones((4, 10), jnp.int32))
    with pytest.raises(ValueError, match="empty vocabulary"):
        jaxnorm.sample(jax.random.key(0), jnp.ones((4, 0), F32))
    with pytest.raises(ValueError, match="k"):
        jaxnorm.top_k(x, 11)
    with pytest.raises(TypeError, match="k"):
        jaxnorm.top_k(x, 2.0)
    with pytest.raises(ValueError, match="top_p"):
        jaxnorm.filter_logits(x, top_p=0)
