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


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("kw", [dict(top_k=5), dict(top_k=9, top_p=0.6), dict(top_k=20, top_p=0.9, min_p=0.01),
                                dict(top_k=1), dict(top_k=256)], ids=str)
def test_filter_many_rows_with_top_k(dtype, kw, rng):
    # 64 rows or more: on the GPU top-k first bounds its boundary bin by each thread's largest
    # token and skips the tokens below it; the filter must stay the reference's bit for bit,
    # also for rows with ties, -inf and NaN.
    x = np.array(logits_of(rng, (80, 4099), F32))
    x[1, :] = 0.5
    x[2, ::3] = -np.inf
    x[3, ::5] = np.nan
    x[4, 100:] = x[4, 0]
    x = jnp.asarray(x, DTYPES[dtype])
    assert same_filtered(jaxnorm.filter_logits(x, **kw), reference.filter_logits(x, **kw))


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


FLAT_FILTERS = [dict(top_k=2500), dict(top_p=0.6), dict(top_k=3000, top_p=0.5), dict(top_k=40, top_p=0.9)]


@pytest.mark.wide(cpu=True)
@pytest.mark.parametrize("kw", FLAT_FILTERS, ids=str)
def test_flat_rows(kw, rng):
    """Rows of four logit values, ~1500 tokens each: the tokens tied at any threshold outnumber
    what a GPU gathers into one CTA (1024), so these rows take the radix passes there (the other
    tests' rows mostly take the gather). Filters bit for bit; class frequencies by chi-square."""
    vocab, draws = 6000, 3000
    cls = rng.integers(0, 4, size=vocab)
    row = jnp.asarray(0.7 * cls, jnp.float32)
    assert same_filtered(jaxnorm.filter_logits(row[None], **kw), reference.filter_logits(row[None], **kw))
    x = jnp.broadcast_to(row, (draws, vocab))
    tokens = np.asarray(jaxnorm.sample(jax.random.key(int(rng.integers(1 << 30))), x, **kw))
    probs = np.asarray(reference.sampling_probs(row, **kw), np.float64)
    assert np.all(probs[tokens] > 0), "a token outside the filter was drawn"
    assert_distribution(cls[tokens], np.bincount(cls, weights=probs, minlength=4))


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


@pytest.mark.parametrize("impl", ["rbg", "unsafe_rbg"])
def test_wide_keys_draw_by_their_data(impl, rng):
    """rbg keys hold four words that repeat their halves ([a, b, a, b]): folded into Philox's two
    words, every seed and every split must still draw its own tokens, at the exact distribution."""
    x = jnp.zeros((1000,), F32)
    seeds = [int(jaxnorm.sample(jax.random.key(s, impl=impl), x)) for s in range(8)]
    assert len(set(seeds)) >= 6, seeds
    keys = jax.random.split(jax.random.key(int(rng.integers(1 << 30)), impl=impl), 4000)
    row = logits_of(rng, (12,), F32, scale=1.5)
    for kw in (dict(), dict(top_k=6)):
        tokens = jax.vmap(lambda k: jaxnorm.sample(k, row, **kw))(keys)
        assert_distribution(tokens, np.asarray(reference.sampling_probs(row, **kw), np.float64))
    # the raw data of such a key draws what the typed key draws
    raw = jax.random.key_data(keys[:8])
    np.testing.assert_array_equal(np.asarray(jaxnorm.sample(raw, jnp.broadcast_to(row, (8, 12)))),
                                  np.asarray(jaxnorm.sample(keys[:8], jnp.broadcast_to(row, (8, 12)))))


def test_infinite_temperature_is_uniform_over_finite_logits(rng):
    """inf acts as 2^126: -inf and NaN logits stay out (inf * 0 would make them NaN), with top-p
    and min-p too."""
    x = jnp.array([1.0, 2.0, 0.5, 3.0, -jnp.inf, jnp.nan, 0.0], F32)
    keys = jax.random.split(jax.random.key(int(rng.integers(1 << 30))), 8000)
    for kw in (dict(), dict(top_p=0.5), dict(top_p=0.5, min_p=0.1), dict(top_k=3), dict(min_p=0.5)):
        for t in (float("inf"), jnp.array(jnp.inf)):
            probs = np.asarray(reference.sampling_probs(x, temperature=t, **kw), np.float64)
            assert np.isfinite(probs).all() and probs[4] == probs[5] == 0, (kw, probs)
            tokens = jax.vmap(lambda k: jaxnorm.sample(k, x, temperature=t, **kw))(keys)
            assert_distribution(tokens, probs)
    # the 5 finite tokens weigh the same, so top-p 0.5 keeps the top 3 (0, 0.2, 0.4 of the mass above
    # them) and min-p 0.5 all 5
    np.testing.assert_allclose(np.asarray(reference.sampling_probs(x, temperature=jnp.inf, top_p=0.5)),
                               [1 / 3, 1 / 3, 0, 1 / 3, 0, 0, 0], rtol=1e-6)
    np.testing.assert_allclose(np.asarray(reference.sampling_probs(x, temperature=jnp.inf, min_p=0.5)),
                               [0.2, 0.2, 0.2, 0.2, 0, 0, 0.2], rtol=1e-6)


def test_huge_top_k_is_off_not_wrapped(rng):
    x = logits_of(rng, (3, 20), F32)
    off = np.asarray(jaxnorm.filter_logits(x))
    for k in (20, 99, 2**31, 2**32 + 1, np.int64(2**40)):
        assert same_filtered(jaxnorm.filter_logits(x, top_k=k), off)
    for k in (np.array([2**32 + 2, 25, -(2**33)], np.int64), jnp.array([2**32 + 2, 25, 0], jnp.int64)):
        assert same_filtered(jaxnorm.filter_logits(x, top_k=k), off)
    with jax.enable_x64(False):  # numpy int64 clamped, not narrowed to int32 by wrapping
        assert same_filtered(jaxnorm.filter_logits(x, top_k=np.array([2**32 + 2, 2**32 + 1, 25], np.int64)), off)
    want = np.asarray(jaxnorm.filter_logits(x, top_k=np.array([2, 0, 5], np.int32)))
    assert same_filtered(jaxnorm.filter_logits(x, top_k=np.array([2, 2**32, 5], np.int64)), want)


def test_reference_clamps_per_row_min_p_as_documented(rng):
    """min_p <= 0 or NaN is off, min_p >= 1 keeps the top token(s): the spec and the kernels agree."""
    # The tied pair above any N(0, 3^2) draw (at 10.0, one of row 4's others passed it 0.3% of runs).
    x = logits_of(rng, (5, 9), F32).at[4, 3].set(50.0).at[4, 6].set(50.0)
    mp = jnp.array([-0.5, jnp.nan, 2.0, 1.0, 3.0])
    got = np.asarray(jaxnorm.filter_logits(x, min_p=mp))
    assert same_filtered(got, reference.filter_logits(x, min_p=mp))
    assert np.isfinite(got[:2]).all() and np.isfinite(got[2:]).sum(axis=1).tolist() == [1, 1, 2]


def test_vmap_single_key_matches_loop(rng):
    xs = logits_of(rng, (3, 4, 60), F32)
    key = jax.random.key(2)
    batched = jax.vmap(lambda x: jaxnorm.sample(key, x, top_p=0.8))(xs)
    for i in range(3):
        np.testing.assert_array_equal(np.asarray(batched[i]), np.asarray(jaxnorm.sample(key, xs[i], top_p=0.8)))


def _token_word(k0, k1, row_in_key, col):
    """The kernels' random word of token `col` (common/sampling_math.h: token_words), in numpy."""
    m = (0xD2511F53, 0xCD9E8D57)
    c, k = [col >> 2, row_in_key, 0x6A6E5331, 0], [k0, k1]
    for _ in range(10):
        p0, p1 = m[0] * c[0], m[1] * c[2]
        c = [(p1 >> 32) ^ c[1] ^ k[0], p1 & 0xFFFFFFFF, (p0 >> 32) ^ c[3] ^ k[1], p0 & 0xFFFFFFFF]
        k = [(k[0] + 0x9E3779B9) & 0xFFFFFFFF, (k[1] + 0xBB67AE85) & 0xFFFFFFFF]
    return c[col & 3]


def test_noise_is_the_documented_philox(rng):
    """The randomness contract, held to a replica: a row with top-k draws the argmax of logit +
    Gumbel noise -ln(-ln u) over its kept tokens, u from token_words(col // 4, row_in_key, key
    data)[col % 4] on the odd multiples of 2^-24 (float64 logs here; the backends' logs round
    differently, which can only flip near-ties, about 1e-5 of these rows). top_k = vocab - 1 drops
    the row's smallest value."""
    hits = 0
    for _ in range(100):
        k1, vocab = int(rng.integers(1 << 32)), int(rng.integers(3, 70))
        x = rng.normal(size=vocab).astype(np.float32)
        u = np.array([((_token_word(7, k1, 0, c) >> 9) * 2 + 1) * 2.0 ** -24 for c in range(vocab)])
        score = np.where(x > x.min(), x.astype(np.float64) - np.log(-np.log(u)), -np.inf)
        got = jaxnorm.sample(jnp.asarray([7, k1], jnp.uint32), jnp.asarray(x), top_k=vocab - 1)
        hits += int(np.argmax(score)) == int(got)
    assert hits >= 99, hits


def _pick_word(k0, k1, row_in_key, rnd):
    """The inverse-transform draws' 64-bit word of round `rnd` (common/sampling_math.h: pick_word)."""
    m = (0xD2511F53, 0xCD9E8D57)
    c, k = [rnd, row_in_key, 0x6A6E5331, 1], [k0, k1]
    for _ in range(10):
        p0, p1 = m[0] * c[0], m[1] * c[2]
        c = [(p1 >> 32) ^ c[1] ^ k[0], p1 & 0xFFFFFFFF, (p0 >> 32) ^ c[3] ^ k[1], p0 & 0xFFFFFFFF]
        k = [(k[0] + 0x9E3779B9) & 0xFFFFFFFF, (k[1] + 0xBB67AE85) & 0xFFFFFFFF]
    return (c[0] << 32) | c[1]


def _masses(x, temperature=1.0):
    """The fixed-point masses exp(s) * 2^38 of jaxnorm/sampling.py (exp in float32, as the kernels
    take it; rounded to the nearest integer) and s = (x - max) / temperature, in float32."""
    s = (x - x.max()) * (np.float32(1.0) / np.float32(temperature))
    return [int(v) for v in np.rint(np.exp(s).astype(np.float64) * 2.0 ** 38)], s


def _top_p_replica(x, p, k0, k1):
    """jaxnorm.sample(key, x, top_p=p) for one float32 row, as jaxnorm/sampling.py states it: the
    inverse-transform rounds over the fixed-point masses, then (every round rejected) the Gumbel
    draw. Also returns how many rounds were rejected."""
    mass, s = _masses(x)
    bins = (255 - np.minimum(-8 * s, np.float32(255)).astype(np.uint32)).tolist()
    bits = x.view(np.uint32).astype(np.int64)
    keys = np.where(bits >> 31 == 1, ~bits & 0xFFFFFFFF, bits | 0x80000000).tolist()
    z = sum(mass)
    target = max(1, math.ceil(float(np.float32(p)) * z))

    def kept(t):  # the mass of the strictly larger values below the target
        return sum(w for w, k in zip(mass, keys) if k > keys[t]) < target

    bin_mass = [sum(w for w, b in zip(mass, bins) if b == i) for i in range(256)]
    bound, above = 255, 0
    while bound > 0 and above + bin_mass[bound] < target:
        above += bin_mass[bound]
        bound -= 1
    sub, pivot = bin_mass[bound], 0
    for rnd in range(4):
        r = (_pick_word(k0, k1, 0, rnd) * (above + sub)) >> 64
        if r < above:
            members = [c for c in range(x.size) if bins[c] > bound]
            members.sort(key=lambda c: (-bins[c], c))
        else:
            r -= above
            members = [c for c in range(x.size) if bins[c] == bound and keys[c] > pivot]
        for t in members:
            if r < mass[t]:
                break
            r -= mass[t]
        if kept(t):
            return t, rnd
        pivot = keys[t]
        sub = sum(mass[c] for c in range(x.size) if bins[c] == bound and keys[c] > pivot)
    u = np.array([((_token_word(k0, k1, 0, c) >> 9) * 2 + 1) * 2.0 ** -24 for c in range(x.size)])
    score = np.where([kept(c) for c in range(x.size)], x.astype(np.float64) - np.log(-np.log(u)), -np.inf)
    return int(np.argmax(score)), 4


def _by_mass_replica(x, k0, k1, temperature=1.0, min_p=0.0):
    """jaxnorm.sample(key, x) without top-k or top-p for one float32 row, as jaxnorm/sampling.py
    states it: a position R = word * Z / 2^64 in the kept tokens' masses, in index order."""
    mass, s = _masses(x, temperature)
    lmp = np.float32(np.log(min_p)) if min_p > 0 else -np.inf
    mass = [w if si >= lmp else 0 for w, si in zip(mass, s)]
    r = (_pick_word(k0, k1, 0, 0) * sum(mass)) >> 64
    for t, w in enumerate(mass):
        if r < w:
            return t
        r -= w


def test_unfiltered_draw_is_the_documented_inverse_transform(rng):
    """No filter, temperature and min-p alone, held to a replica of their documented rule on rows
    whose masses are spread (scale 2) or nearly flat (0.01). exp rounds differently on each
    backend, which can only move a draw within a few 2^-38 units of a token's edge."""
    hits = 0
    for i in range(120):
        k1, vocab = int(rng.integers(1 << 32)), int(rng.integers(2, 90))
        x = ((2.0, 0.01)[i % 2] * rng.normal(size=vocab)).astype(np.float32)
        kw = (dict(), dict(temperature=0.6), dict(min_p=0.2))[i % 3]
        want = _by_mass_replica(x, 7, k1, **kw)
        hits += want == int(jaxnorm.sample(jnp.asarray([7, k1], jnp.uint32), jnp.asarray(x), **kw))
    assert hits >= 118, hits


@pytest.mark.wide(cpu=True)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_unfiltered_wide_rows_frequencies(dtype, rng):
    """Rows of 32768 columns (a cluster of CTAs on a GPU, each summing its chunk's masses; the draw
    picks the CTA, then the token in it): 12 tokens spread over the row carry half the mass and
    the rest lies in the tail at -8. Frequencies of the 12 and of the tail in 16 spans of the
    row by chi-square; with min-p the tail is never drawn."""
    vocab, draws = 32768, 2000
    row = np.full(vocab, -8.0, np.float32)
    hot = np.sort(rng.choice(vocab, 12, replace=False))
    row[hot] = rng.uniform(0.0, 2.0, 12) + math.log(vocab * math.exp(-8.0) / 12 / 3.0)
    row = jnp.asarray(row, DTYPES[dtype])
    x = jnp.broadcast_to(row, (draws, vocab))
    key = jax.random.key(int(rng.integers(1 << 30)))
    for kw in (dict(), dict(min_p=0.01)):
        tokens = np.asarray(jaxnorm.sample(key, x, **kw))
        probs = np.asarray(reference.sampling_probs(row, **kw), np.float64)
        assert np.all(probs[tokens] > 0), "a token outside the filter was drawn"
        cls = np.where(np.isin(np.arange(vocab), hot), 16 + np.searchsorted(hot, np.arange(vocab)) % 12,
                       np.arange(vocab) * 16 // vocab)
        assert_distribution(cls[tokens], np.bincount(cls, weights=probs, minlength=28))


def test_top_p_draw_is_the_documented_inverse_transform(rng):
    """Top-p alone, held to a replica of its documented rule, on rows whose value bins (1/8 wide)
    hold one token or dozens, so draws land above the crossing bin, in it (accepted, or rejected
    and drawn again), and some rows reject every round. exp rounds differently on each backend,
    which can only move a draw that falls within a few 2^-38 units of a token's edge."""
    hits, rounds = 0, []
    for i in range(100):
        k1, vocab = int(rng.integers(1 << 32)), int(rng.integers(2, 90))
        scale = (2.0, 0.1, 0.01)[i % 3]
        x = (scale * rng.normal(size=vocab)).astype(np.float32)
        p = float(rng.uniform(0.02, 0.95))
        want, n = _top_p_replica(x, p, 7, k1)
        rounds.append(n)
        hits += want == int(jaxnorm.sample(jnp.asarray([7, k1], jnp.uint32), jnp.asarray(x), top_p=p))
    assert hits >= 98, hits
    assert min(rounds) == 0 and max(rounds) >= 2, rounds  # the rows exercise the rounds


@pytest.mark.parametrize("p", [0.5, 0.004])
def test_top_p_rounds_frequencies(p, rng):
    """Rows of 100 distinct values 0.001 apart: one value bin holds them all, so every draw is
    tested and a rejected one drawn again above it; at p = 0.004 only the largest is kept and
    most rows reject all four rounds (the exact fallback). Frequencies by chi-square."""
    row = jnp.asarray(0.001 * rng.permutation(100), jnp.float32)
    x = jnp.broadcast_to(row, (N_DRAWS // 4, 100))
    tokens = jaxnorm.sample(jax.random.key(int(rng.integers(1 << 30))), x, top_p=p)
    assert_distribution(tokens, np.asarray(reference.sampling_probs(row, top_p=p), np.float64))


# A raw key whose token 0 (row_in_key 0) draws the largest uniform there is, 1 - 2^-24 (found by
# searching keys with _token_word): its Gumbel noise, -ln(-ln(u)) = 16.6, is the largest a token
# can get. A fast __logf may return 0 there (PyTorch guards it), which would make the noise +inf;
# on sm_90 it did not (benchmarks/results/h200-sampling-e0a2848/edge-old.log).
EDGE_KEY = (0, 246532)


@pytest.mark.parametrize("one_read", ["0", "1"])
def test_the_largest_uniform_draws_finite_noise(one_read, monkeypatch):
    """Token 0 gets u = 1 - 2^-24 on every row (one key a row, so every row draws alike). Rows with
    top-k (a Gumbel draw) where that noise, 16.6, must win (token 0 level with 39999 others, or 5
    below 6 others; by ordinary noise it would win once in 40000, or in 1000) check the replica
    above; rows where token 0 is 40 below the rest (a kept token: top-k with it inside; no filter
    and min-p, which draw by mass) must never draw it, as a Gumbel draw would with an infinite
    noise. Small rows and cluster rows, both kernels on a GPU."""
    assert _token_word(*EDGE_KEY, 0, 0) >> 9 == (1 << 23) - 1
    monkeypatch.setenv("JAXNORM_SAMPLING_ONE_READ", one_read)
    for vocab in (8, 40000):
        up = np.full((1, vocab), -5.0, np.float32)
        if vocab == 8:  # top-7: tokens 1..6 and token 0
            up[0, 0], up[0, 7] = -10.0, -100.0
        down = np.zeros((1, vocab), np.float32)
        down[0, 0] = -40.0
        k_rows = np.full((1, vocab), -100.0, np.float32)  # top-k 8 keeps tokens 0..7, token 0 last
        k_rows[0, :8] = 0.0
        k_rows[0, 0] = -40.0
        cases = [(up, dict(top_k=vocab - 1), True), (down, {}, False), (down, dict(min_p=1e-30), False),
                 (k_rows, dict(top_k=8), False), (k_rows, dict(top_k=8, top_p=1.0), False)]
        for rows, kw, drawn in cases:
            x = jnp.asarray(np.repeat(rows, 64, axis=0))  # 64 rows: where rows queue on a GPU
            keys = jnp.tile(jnp.asarray(EDGE_KEY, jnp.uint32), (64, 1))
            tokens = np.asarray(jaxnorm.sample(keys, x, **kw))
            assert np.all((tokens == 0) == drawn), (vocab, kw, tokens[:8])


# ----------------------------------------------------------------------------------------------
# The decoding loop's logits update: output bias, finished rows forced to end_id

# Tokens of the sampler before the update existed (commit b560cf5, CPU handler): without a bias
# the v2 target must draw exactly these. The CUDA kernels draw the same noise but round exp/log
# differently from the CPU's libm, so only the CPU is held to these literal tokens. top_p_temp
# (top-p alone) is the CPU handler's at e266c78, where top-p alone took the inverse-transform draw
# (jaxnorm/sampling.py); before, [11, 247, 205, 162, 284, 86, 90, 108]. plain and min_p_per_row_keys
# are the CPU handler's since rows without top-k or top-p took the inverse-transform draw too;
# before, [11, 247, 205, 248, 284, 12, 155, 89] and [166, 203, 56, 162, 19, 86, 129, 99].
GOLDEN_BEFORE_V2 = {
    "plain": [11, 153, 201, 269, 170, 274, 228, 244],
    "top_k": [11, 247, 205, 162, 284, 273, 155, 93],
    "top_p_temp": [11, 132, 205, 278, 242, 57, 129, 235],
    "min_p_per_row_keys": [11, 256, 38, 199, 183, 258, 124, 244],
    "bf16_k_p": [11, 159, 229, 213, 163, 198, 129, 292],
}


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="literal tokens of the CPU handler")
def test_no_bias_draws_the_tokens_of_before():
    x = jnp.asarray(2.0 * np.random.default_rng(20240613).normal(size=(8, 300)), jnp.float32)
    keys = jax.random.split(jax.random.key(42), 8)
    got = {
        "plain": jaxnorm.sample(jax.random.key(7), x),
        "top_k": jaxnorm.sample(jax.random.key(7), x, top_k=20),
        "top_p_temp": jaxnorm.sample(jax.random.key(7), x, temperature=0.7, top_p=0.8),
        "min_p_per_row_keys": jaxnorm.sample(keys, x, min_p=0.05),
        "bf16_k_p": jaxnorm.sample(jax.random.key(9), x.astype(jnp.bfloat16), top_k=50, top_p=0.9),
    }
    assert {k: np.asarray(v).tolist() for k, v in got.items()} == GOLDEN_BEFORE_V2


def _sample_v1(key, x, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0):
    """The first sample target as an artifact exported before FFI version 4 calls it."""
    from jaxnorm import _ops
    row = lambda v, dt: jnp.full((1,), v, dt)  # noqa: E731
    (tok,) = _ops.sample_v1_p.bind(x, jax.random.key_data(key).reshape(1, -1), row(temperature, jnp.float32),
                                   row(top_k, jnp.int32), row(top_p, jnp.float32), row(np.log(min_p) if min_p > 0 else -np.inf, jnp.float32))
    return tok


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_no_bias_is_the_first_target(dtype, rng):
    """On every backend: v2 without bias or finished draws what the kept first target draws."""
    x = logits_of(rng, (64, 1000), DTYPES[dtype])
    key = jax.random.key(int(rng.integers(1 << 30)))
    for kw in (dict(), dict(top_k=30), dict(top_p=0.8, temperature=0.6), dict(min_p=0.05), dict(temperature=0.0)):
        np.testing.assert_array_equal(np.asarray(jaxnorm.sample(key, x, **kw)), np.asarray(_sample_v1(key, x, **kw)))
    from jaxnorm import _ops
    row = lambda v, dt: jnp.full((1,), v, dt)  # noqa: E731
    (old,) = _ops.filter_v1_p.bind(x, row(9, jnp.int32), row(0.7, jnp.float32), row(np.log(0.01), jnp.float32))
    assert same_filtered(jaxnorm.filter_logits(x, top_k=9, top_p=0.7, min_p=0.01), old)


UPDATE_FILTERS = [dict(), dict(top_k=7), dict(top_p=0.6, temperature=0.8), dict(top_k=20, top_p=0.9, min_p=0.02),
                  dict(temperature=0.0)]


@pytest.mark.parametrize("dtype,bias_dtype", [("float32", "float32"), ("bfloat16", "float32"),
                                              ("bfloat16", "bfloat16"), ("float16", "float16")])
@pytest.mark.parametrize("kw", UPDATE_FILTERS, ids=str)
def test_bias_is_sampling_the_float32_sum(dtype, bias_dtype, kw, rng):
    """Bit for bit: sample(x, bias=b) == sample(x + b in float32), also where rows are finished
    (the other rows), for wide rows too (cluster paths on a GPU)."""
    for shape in ((6, 5, 700), (3, 40000)):
        x = logits_of(rng, shape, DTYPES[dtype])
        b = logits_of(rng, shape[-1:], DTYPES[bias_dtype])
        key = jax.random.key(int(rng.integers(1 << 30)))
        want = np.asarray(jaxnorm.sample(key, x.astype(F32) + b.astype(F32), **kw))
        got = jax.jit(lambda k, x, b: jaxnorm.sample(k, x, bias=b, **kw))(key, x, b)
        np.testing.assert_array_equal(np.asarray(got), want)
        fin = jnp.asarray(rng.random(shape[:-1]) < 0.4)
        got = np.asarray(jaxnorm.sample(key, x, bias=b, finished=fin, end_id=3, **kw))
        np.testing.assert_array_equal(got[~np.asarray(fin)], want[~np.asarray(fin)])
        assert np.all(got[np.asarray(fin)] == 3)


def _special_rows(rng, vocab, dtype):
    """Rows that a GPU's one-read top-k path must hand to the general passes, or handle at an edge:
    thousands of tokens tied at the top (its lists overflow), a constant row, NaN and -inf
    scattered, fewer finite tokens than k, a +inf row, an all -inf row."""
    rows = np.array(logits_of(rng, (8, vocab), F32))
    rows[0, rng.choice(vocab, size=min(vocab, 3000), replace=False)] = 9.0
    rows[1] = 1.25
    rows[2, rng.random(vocab) < 0.3] = np.nan
    rows[2, rng.random(vocab) < 0.3] = -np.inf
    rows[3] = -np.inf
    rows[3, rng.choice(vocab, size=20, replace=False)] = rng.normal(size=20)
    rows[4, 7] = np.inf
    rows[5] = -np.inf
    return jnp.asarray(rows, dtype)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("vocab", [700, 40000, pytest.param(128256, marks=pytest.mark.wide)])
def test_one_read_top_k_draws_the_general_paths_tokens(dtype, vocab, rng, monkeypatch):
    """Bit for bit on a GPU: the sampler with top_k, its one-read kernel forced
    (JAXNORM_SAMPLING_ONE_READ=1, stream_select.cuh), against the general passes (=0), with and
    without an output bias, for k up to and past a CTA's delegates (256 or 512 threads), with
    top-p and min-p, per-row parameters, special rows, and batches that take either CTA size;
    and the kernel the rule picks. On the CPU the switch does nothing."""
    key = jax.random.key(int(rng.integers(1 << 30)))
    bias = logits_of(rng, (vocab,), F32, scale=0.5)
    for rows in (8, 64, 200):
        x = logits_of(rng, (rows, vocab), DTYPES[dtype])
        x = x.at[:8].set(_special_rows(rng, vocab, DTYPES[dtype]))
        ks = jnp.asarray(rng.choice([0, 1, 2, 50, 256, 257, 600], size=rows), jnp.int32)
        cases = [dict(top_k=50), dict(top_k=1), dict(top_k=256, top_p=0.9), dict(top_k=20, top_p=0.5, min_p=0.02),
                 dict(top_k=ks), dict(top_k=ks, temperature=jnp.asarray(rng.uniform(0.0, 2.0, rows), F32))]
        for kw in cases:
            monkeypatch.setenv("JAXNORM_SAMPLING_ONE_READ", "0")
            want = np.asarray(jaxnorm.sample(key, x, **kw))
            want_b = np.asarray(jaxnorm.sample(key, x, bias=bias, **kw))
            monkeypatch.setenv("JAXNORM_SAMPLING_ONE_READ", "1")
            got = np.asarray(jaxnorm.sample(key, x, **kw))
            got_b = np.asarray(jaxnorm.sample(key, x, bias=bias, **kw))
            monkeypatch.delenv("JAXNORM_SAMPLING_ONE_READ")
            np.testing.assert_array_equal(np.asarray(jaxnorm.sample(key, x, **kw)), want)  # the rule's choice
            np.testing.assert_array_equal(got, want, err_msg=f"{rows} rows, {kw}")
            np.testing.assert_array_equal(got_b, want_b, err_msg=f"{rows} rows, {kw}, bias")
            assert np.all(got[5] == -1) and got[4] == 7


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("vocab", [96, 701, 40000, pytest.param(128256, marks=pytest.mark.wide),
                                   pytest.param(151936, marks=pytest.mark.wide)])
def test_by_mass_kernel_draws_the_general_kernels_tokens(dtype, vocab, rng, monkeypatch):
    """Bit for bit on a GPU: calls with neither top_k nor top_p (jaxnorm_sample_by_mass), the
    register-held kernel (mass_rows.cuh: rows of whole 16-byte packs) against the general kernel
    (JAXNORM_SAMPLING_BY_MASS=0), with and without an output bias and finished rows, min-p,
    per-row temperatures with greedy rows, special rows (ties, NaN, +-inf), batches that spread
    rows over 1-16 CTAs (100 rows of 96 tokens: a CTA a row, launched without
    clusters, whose exchanges go through its own shared memory), and rows that hold 16 or 32
    tokens a thread (151936). On the CPU the switch does nothing."""
    key = jax.random.key(int(rng.integers(1 << 30)))
    bias = logits_of(rng, (vocab,), F32, scale=0.5)
    for rows in (1, 8, 64, 100, 200):
        x = logits_of(rng, (rows, vocab), DTYPES[dtype])
        if rows >= 8:
            x = x.at[:8].set(_special_rows(rng, vocab, DTYPES[dtype]))
        temps = jnp.asarray(np.where(rng.random(rows) < 0.3, 0.0, rng.uniform(0.3, 2.0, rows)), F32)
        fin = jnp.asarray(rng.random(rows) < 0.3)
        cases = [dict(), dict(min_p=0.05), dict(temperature=temps), dict(temperature=temps, min_p=0.2),
                 dict(bias=bias), dict(bias=bias, min_p=0.1, finished=fin, end_id=3)]
        for kw in cases:
            monkeypatch.setenv("JAXNORM_SAMPLING_BY_MASS", "0")
            want = np.asarray(jaxnorm.sample(key, x, **kw))
            monkeypatch.delenv("JAXNORM_SAMPLING_BY_MASS")
            got = np.asarray(jaxnorm.sample(key, x, **kw))
            np.testing.assert_array_equal(got, want, err_msg=f"{rows} rows, {sorted(kw)}")
            if rows >= 8 and "finished" not in kw:
                assert np.all(got[5] == -1) and got[4] == 7
        # Every row finished: the CTAs meet no barrier before the exit's.
        np.testing.assert_array_equal(np.asarray(jaxnorm.sample(key, x, finished=jnp.ones(rows, bool), end_id=3)), 3)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("kw", [dict(), dict(top_k=6), dict(top_p=0.7), dict(temperature=0.6, min_p=0.05)], ids=str)
def test_bias_frequencies(dtype, kw, rng):
    """The draws follow reference.sampling_probs(row, bias=...), which the bias moves far from the
    unbiased distribution (so a sampler ignoring the bias fails): row + bias = -row plus a small
    random spread, so the likeliest tokens become the least likely (a random bias could leave
    both distributions on the same single token under min_p and a low temperature)."""
    vocab = 24
    row = logits_of(rng, (vocab,), DTYPES[dtype], scale=1.5)
    bias = jnp.asarray(-2.0 * np.asarray(row, np.float64) + rng.uniform(-0.1, 0.1, vocab), jnp.float32)
    probs = np.asarray(reference.sampling_probs(row, bias=bias, **kw), np.float64)
    unbiased = np.asarray(reference.sampling_probs(row, **kw), np.float64)
    assert 0.5 * np.abs(probs - unbiased).sum() > 0.2
    x = jnp.broadcast_to(row, (N_DRAWS, vocab))
    tokens = jax.jit(lambda k, x: jaxnorm.sample(k, x, bias=bias, **kw))(jax.random.key(int(rng.integers(1 << 30))), x)
    assert_distribution(tokens, probs)


def test_greedy_with_bias(rng):
    x = jnp.asarray(rng.integers(0, 4, size=(50, 30)), jnp.float32)
    # Distinct biases spread far wider than the logits' range, so the bias picks most rows' token
    # (rng.integers(-2, 3) moved only 22% of them in one CI run; this form moved >= 38% in each
    # of 20000 seeds); exact in bfloat16.
    bias = jnp.asarray(0.5 * rng.permutation(30) - 7.5, jnp.bfloat16)
    want = np.argmax(np.asarray(x) + np.asarray(bias, np.float32), axis=-1)  # lowest index on ties
    assert np.mean(want != np.argmax(np.asarray(x), axis=-1)) > 0.3  # the bias moves the argmax
    got = jaxnorm.sample(jax.random.key(0), x, temperature=0.0, top_k=3, bias=bias)
    np.testing.assert_array_equal(np.asarray(got), want)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("kw", FILTERS[:6], ids=str)
def test_filter_with_bias_matches_reference(dtype, kw, rng):
    x = logits_of(rng, (4, 3, 1000), DTYPES[dtype])
    b = logits_of(rng, (1000,), F32)
    got = jax.jit(lambda x, b: jaxnorm.filter_logits(x, bias=b, **kw))(x, b)
    want = reference.filter_logits(x, bias=b, **kw)
    assert got.dtype == x.dtype and got.shape == x.shape
    assert same_filtered(got, want)
    if dtype == "float32":  # exact: the kept entries are logits + bias
        assert same_filtered(got, jaxnorm.filter_logits(x + b, **kw))


def test_bias_on_another_axis_and_nonfinite(rng):
    x = logits_of(rng, (40, 6), F32)  # vocabulary on axis 0
    b = logits_of(rng, (40,), F32).at[3].set(-jnp.inf).at[5].set(jnp.inf)
    key = jax.random.key(4)
    np.testing.assert_array_equal(np.asarray(jaxnorm.sample(key, x, axis=0, bias=b)),
                                  np.asarray(jaxnorm.sample(key, x + b[:, None], axis=0)))
    assert np.all(np.asarray(jaxnorm.sample(key, x, axis=0, bias=b)) == 5)  # a +inf bias takes the row
    y = x.at[5, 0].set(-jnp.inf)  # -inf + inf is NaN: never drawn
    assert int(jaxnorm.sample(key, y, axis=0, bias=b, temperature=0.0)[0]) != 5


def test_finished_rows_return_end_id(rng):
    """Over many keys a finished row returns end_id and nothing else, whatever its logits (no
    finite one, NaN) and parameters; unfinished rows are unchanged by the others' flags."""
    x = logits_of(rng, (6, 50), F32, scale=0.5).at[1].set(-jnp.inf).at[4].set(jnp.nan)
    fin = jnp.array([True, False, True, False, True, False])
    bias = logits_of(rng, (50,), F32, scale=0.5)
    keys = jax.random.split(jax.random.key(int(rng.integers(1 << 30))), 300)
    f = jax.jit(jax.vmap(lambda k: jaxnorm.sample(k, x, top_p=0.9, bias=bias, finished=fin, end_id=49)))
    tok = np.asarray(f(keys))
    assert np.all(tok[:, [0, 2, 4]] == 49)
    assert np.all(tok[:, 1] == -1)  # unfinished, no finite logit
    free = np.asarray(jax.vmap(lambda k: jaxnorm.sample(k, x, top_p=0.9, bias=bias))(keys))
    np.testing.assert_array_equal(tok[:, [1, 3, 5]], free[:, [1, 3, 5]])
    assert len(np.unique(tok[:, 3])) > 3  # and they do draw
    greedy = jaxnorm.sample(keys[0], x, temperature=0.0, bias=bias, finished=fin, end_id=0)
    np.testing.assert_array_equal(np.asarray(greedy)[[0, 2, 4]], 0)


def test_per_row_end_id_and_broadcast_flags(rng):
    x = logits_of(rng, (3, 4, 20), F32)
    end_id = jnp.arange(12, dtype=jnp.int32).reshape(3, 4) + 5
    fin = jnp.asarray(rng.random((3, 4)) < 0.5)
    got = np.asarray(jaxnorm.sample(jax.random.key(1), x, finished=fin, end_id=end_id))
    np.testing.assert_array_equal(got[np.asarray(fin)], np.asarray(end_id)[np.asarray(fin)])
    # a flag per column of the batch (broadcast), a scalar flag, an end_id per leading row
    col = jnp.array([True, False, True, False])
    got = np.asarray(jaxnorm.sample(jax.random.key(1), x, finished=col, end_id=jnp.array([[1], [2], [3]])))
    np.testing.assert_array_equal(got[:, [0, 2]], [[1, 1], [2, 2], [3, 3]])
    everything = jaxnorm.sample(jax.random.key(1), x, finished=True, end_id=7)
    np.testing.assert_array_equal(np.asarray(everything), 7)
    none = jaxnorm.sample(jax.random.key(1), x, finished=False, end_id=7)
    np.testing.assert_array_equal(np.asarray(none), np.asarray(jaxnorm.sample(jax.random.key(1), x)))


def test_traced_end_id_is_written_as_given(rng):
    """An end_id array is not range-checked: a finished row returns it as given, even outside
    [0, vocab) (the docstring's contract), under jit."""
    x = logits_of(rng, (4, 10), F32)
    f = jax.jit(lambda e: jaxnorm.sample(jax.random.key(0), x, finished=jnp.array([True, True, True, False]),
                                         end_id=e))
    got = np.asarray(f(jnp.array([-1, 10, 1 << 30, -5], jnp.int32)))
    np.testing.assert_array_equal(got[:3], [-1, 10, 1 << 30])
    assert 0 <= got[3] < 10


def test_logits_update_vmap_and_jit(rng):
    xs = logits_of(rng, (3, 5, 40), F32)
    keys = jax.random.split(jax.random.key(5), 3)
    fin = jnp.asarray(rng.random((3, 5)) < 0.5)
    ends = jnp.array([1, 2, 3], jnp.int32)
    bias = logits_of(rng, (40,), F32)
    biases = logits_of(rng, (3, 40), F32)

    def one(k, x, f, e, b):
        return jaxnorm.sample(k, x, top_k=8, bias=b, finished=f, end_id=e)

    loop = np.stack([np.asarray(one(keys[i], xs[i], fin[i], ends[i], bias)) for i in range(3)])
    got = jax.jit(jax.vmap(one, (0, 0, 0, 0, None)))(keys, xs, fin, ends, bias)  # shared bias: one launch
    np.testing.assert_array_equal(np.asarray(got), loop)
    loop = np.stack([np.asarray(one(keys[i], xs[i], fin[i], ends[i], biases[i])) for i in range(3)])
    got = jax.vmap(one)(keys, xs, fin, ends, biases)  # a bias per example: mapped
    np.testing.assert_array_equal(np.asarray(got), loop)
    # unbatched finished/end_id with batched logits
    got = jax.vmap(lambda k, x: one(k, x, fin[0], 9, bias))(keys, xs)
    assert np.all(np.asarray(got)[:, np.asarray(fin[0])] == 9)
    filt = jax.vmap(lambda x, b: jaxnorm.filter_logits(x, top_k=4, bias=b))(xs, biases)
    assert same_filtered(filt, reference.filter_logits(xs, top_k=4, bias=biases[:, None, :]))


@pytest.mark.parametrize("kw,err,match", [
    (dict(bias=jnp.ones((11,), F32)), ValueError, r"`bias` must have shape \(10,\).*\(4, 10\).*\(11,\)"),
    (dict(bias=jnp.ones((4, 10), F32)), ValueError, r"`bias` must have shape \(10,\)"),
    (dict(bias=jnp.ones((10,), jnp.int32)), TypeError, "`bias` must be float32"),
    (dict(bias=jnp.ones((10,), jnp.float64)), TypeError, "`bias` must be float32"),
    (dict(finished=jnp.ones((4,), bool)), ValueError, "`finished` needs `end_id`"),
    (dict(end_id=3), ValueError, "`end_id` needs `finished`"),
    (dict(finished=jnp.ones((4,), jnp.int32), end_id=3), TypeError, "`finished` must be a bool array, got int32"),
    (dict(finished=jnp.ones((3,), bool), end_id=3), ValueError, r"`finished` of shape \(3,\).*batch shape \(4,\)"),
    (dict(finished=jnp.ones((4,), bool), end_id=2.0), TypeError, "`end_id` must be an int"),
    (dict(finished=jnp.ones((4,), bool), end_id=True), TypeError, "`end_id`"),
    (dict(finished=jnp.ones((4,), bool), end_id=jnp.ones((4,), jnp.float32)), TypeError, "`end_id` must be an integer"),
    (dict(finished=jnp.ones((4,), bool), end_id=jnp.ones((5,), jnp.int32)), ValueError, r"`end_id` of shape \(5,\)"),
    (dict(finished=jnp.ones((4,), bool), end_id=10), ValueError, r"`end_id` must lie in \[0, 10\).*got 10"),
    (dict(finished=jnp.ones((4,), bool), end_id=-1), ValueError, r"`end_id` must lie in \[0, 10\)"),
    (dict(finished=jnp.ones((4,), bool), end_id=np.array([1, 2, 3, 12])), ValueError, "got 12"),
])
def test_logits_update_bad_arguments(kw, err, match):
    x = jnp.ones((4, 10), F32)
    with pytest.raises(err, match=match):
        jax.jit(lambda x: jaxnorm.sample(jax.random.key(0), x, **kw))(x)


@pytest.mark.parametrize("axis", [0, 1, -2])
def test_top_k_axis_as_lax(axis, rng):
    """`axis` as lax.top_k's: values and indices along it, ties by the lower index, gradients."""
    x = jnp.asarray(rng.integers(0, 6, size=(7, 9, 5)), F32)  # many ties
    ours, theirs = jaxnorm.top_k(x, 3, axis=axis), jax.lax.top_k(x, 3, axis=axis)
    for a, b in zip(ours, theirs):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    ct = jnp.asarray(rng.normal(size=ours[0].shape), F32)
    g = jax.grad(lambda x: jnp.sum(jaxnorm.top_k(x, 3, axis=axis)[0] * ct))(x)
    np.testing.assert_array_equal(g, jax.grad(lambda x: jnp.sum(jax.lax.top_k(x, 3, axis=axis)[0] * ct))(x))
    with pytest.raises(ValueError, match="axis 3 is out of range"):
        jaxnorm.top_k(x, 3, axis=3)


def test_filter_logits_has_no_gradient_by_bias_either():
    """filter_logits returns logits + bias where kept: differentiating by the bias raises as by
    the logits (the op is forward-only), never a silent zero."""
    x, b = jnp.ones((2, 4), F32), jnp.zeros((4,), F32)
    for argnum in (0, 1):
        with pytest.raises(NotImplementedError):
            jax.grad(lambda x, b: jnp.sum(jaxnorm.filter_logits(x, bias=b, top_k=2)), argnum)(x, b)
    # sample's tokens are integers: a bias beside a differentiated path stays allowed
    g = jax.grad(lambda b: jnp.sum(b) + jaxnorm.sample(jax.random.key(0), x, bias=b).sum())(b)
    np.testing.assert_array_equal(g, np.ones(4, np.float32))


def test_filter_bias_bad_arguments():
    with pytest.raises(ValueError, match=r"filter_logits: `bias` must have shape \(10,\)"):
        jaxnorm.filter_logits(jnp.ones((4, 10), F32), bias=jnp.ones((9,), F32))


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


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("scale,shift", [(1e-3, 0.0), (1e3, 0.0), (1.0, -60.0), (1e-30, 0.0), (3.0, 1e4)])
def test_top_k_value_scales(dtype, scale, shift, rng):
    # The CUDA kernel's first pass bins keys in a window below the row's largest (rows of 64K
    # columns or more; bfloat16 also at k > 512): rows of any spread and sign must still come out
    # exact, through the window or the radix passes.
    x = (logits_of(rng, (3, 70000), F32) * scale + shift).astype(DTYPES[dtype])
    for k in (1, 50, 1024):
        np.testing.assert_array_equal(np.asarray(jaxnorm.top_k(x, k)[1]), np.asarray(jax.lax.top_k(x, k)[1]))


def _total_order_top_k(x, k):
    """Indices of the k largest of each row in lax.top_k's order: -NaN < -inf < ... < -0 < +0 < ...
    < +inf < +NaN, ties by ascending index."""
    b = np.asarray(x.astype(F32)).view(np.uint32)
    keys = np.where(b & 0x80000000, ~b, b | 0x80000000).astype(np.int64)
    return np.argsort(-keys, axis=-1, kind="stable")[:, :k]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("vocab", [700, 40000, pytest.param(128256, marks=pytest.mark.wide)])
def test_top_k_one_read_matches_lax(dtype, vocab, rng, monkeypatch):
    """On a GPU: top_k with its one-read kernel forced (JAXNORM_SAMPLING_ONE_READ=1,
    stream_select.cuh: k up to 1024, past a CTA's threads by the rising floor), with the general
    passes forced (=0), and with the rule's pick, each against lax.top_k, on batches that take
    either CTA size, k at and past the delegates, and rows the one-read path must hand back or
    order at an edge: thousands of tied maxima, a constant row, NaN and -inf scattered, +inf, all
    -inf, -0 and +0 mixed, moderate ties, ascending and descending rows (every round of an
    ascending row passes the floor: its list overflows mid-row). The reference is the documented
    total order (lax.top_k's on the CPU): on the GPU, lax.top_k of k = 1, 2 over 40000 float32
    columns misorders a row with NaN (XLA's own kernel)."""
    for rows in (1, 8, 64, 200):
        x = np.array(logits_of(rng, (rows, vocab), F32))
        if rows >= 8:
            x[:6] = np.asarray(_special_rows(rng, vocab, F32))[:6]
            x[6] = np.where(rng.random(vocab) < 0.5, -0.0, 0.0)
            x[7] = np.round(x[7], 1)
        if rows >= 64:
            x[8] = np.sort(x[8])
            x[9] = np.sort(x[9])[::-1]
        x = jnp.asarray(x, DTYPES[dtype])
        for k in (1, 2, 50, 256, 257, 600, 1024):
            if k > vocab:
                continue
            want = _total_order_top_k(x, k)
            for switch in ("0", "1", None):
                if switch is None:
                    monkeypatch.delenv("JAXNORM_SAMPLING_ONE_READ", raising=False)
                else:
                    monkeypatch.setenv("JAXNORM_SAMPLING_ONE_READ", switch)
                got = np.asarray(jaxnorm.top_k(x, k)[1])
                np.testing.assert_array_equal(got, want, err_msg=f"{rows} rows, k={k}, switch {switch}")


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
    bias, fin = logits_of(rng, (100,), F32), jnp.array([True, False, False, True])
    hlo = lambda f, *a: jax.jit(f).lower(*a).as_text()  # noqa: E731
    # the versioned targets only (FFI version 4): the first versions are kept for old artifacts;
    # calls with top_k lower to jaxnorm_sample_with_top_k (FFI version 5), calls with neither
    # top_k nor top_p to jaxnorm_sample_by_mass (FFI version 6)
    for text in (hlo(lambda k, x: jaxnorm.sample(k, x, top_k=0, top_p=0.5), key, x),
                 hlo(lambda k, x: jaxnorm.sample(k, x, top_p=jnp.full(4, 0.5), bias=bias), key, x)):
        assert "@jaxnorm_sample_v2(" in text and "@jaxnorm_sample(" not in text
        assert "@jaxnorm_sample_with_top_k(" not in text and "@jaxnorm_sample_by_mass(" not in text
    for text in (hlo(lambda k, x: jaxnorm.sample(k, x), key, x),
                 hlo(lambda k, x: jaxnorm.sample(k, x, top_k=0, top_p=1.0, min_p=0.1, temperature=0.5), key, x),
                 hlo(lambda k, x: jaxnorm.sample(k, x, bias=bias, finished=fin, end_id=2), key, x)):
        assert "@jaxnorm_sample_by_mass(" in text and "@jaxnorm_sample_v2(" not in text
    for text in (hlo(lambda k, x: jaxnorm.sample(k, x, top_k=5), key, x),
                 hlo(lambda k, x: jaxnorm.sample(k, x, top_k=5, bias=bias), key, x),
                 hlo(lambda k, x: jaxnorm.sample(k, x, top_k=jnp.arange(4), finished=fin, end_id=2), key, x)):
        assert "@jaxnorm_sample_with_top_k(" in text and "@jaxnorm_sample_v2(" not in text
    for text in (hlo(lambda x: jaxnorm.filter_logits(x, top_p=0.5), x),
                 hlo(lambda x: jaxnorm.filter_logits(x, top_p=0.5, bias=bias), x)):
        assert "@jaxnorm_filter_v2(" in text and "@jaxnorm_filter(" not in text
    assert "@jaxnorm_top_k(" in hlo(lambda x: jaxnorm.top_k(x, 5), x)


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


def test_vocabulary_past_the_mass_sums_is_refused():
    """Rows longer than 2^25 tokens could overflow the 64-bit sums of 2^38-unit masses: refused at
    trace time (shapes only: nothing is allocated)."""
    key = jax.random.key(0)
    too_long = jax.ShapeDtypeStruct((2, jaxnorm.sampling.MAX_VOCAB + 8), jnp.bfloat16)
    for f in (lambda x: jaxnorm.sample(key, x), lambda x: jaxnorm.filter_logits(x, top_p=0.5)):
        with pytest.raises(ValueError, match="at most 2\\^25"):
            jax.eval_shape(f, too_long)
    jax.eval_shape(lambda x: jaxnorm.sample(key, x), jax.ShapeDtypeStruct((2, jaxnorm.sampling.MAX_VOCAB), jnp.bfloat16))


def test_bad_keys_and_logits():
    x = jnp.ones((4, 10), F32)
    with pytest.raises(TypeError, match="key"):
        jaxnorm.sample(0, x)
    with pytest.raises(TypeError, match="key"):
        jaxnorm.sample(jnp.ones((2,), jnp.float32), x)
    with pytest.raises(ValueError, match="one key per row"):
        jaxnorm.sample(jax.random.split(jax.random.key(0), 3), x)
    for width in (0, 1, 3, 5):  # raw keys hold PRNGKey's 2 words or rbg's 4
        with pytest.raises(ValueError, match=r"raw uint32 `key` must hold 2 or 4 words.*\(" + str(width)):
            jaxnorm.sample(jnp.zeros((width,), jnp.uint32), x)
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
