"""linear_attention and linear_attention_step against jaxnorm.reference (float64 on the inputs'
exact values): causal (the kernel) and non-causal (jnp), normalized or not, every feature map
(elu+1, identity, callables), every dtype and head dim pair, lengths around the 64-position chunk,
a long sequence against the recurrent form; both layouts; every gradient, forward mode, second
order, vmap, jit; the final state and the recurrent step; bitwise reproducibility; the custom
call in the HLO (forward and backward); empty inputs; and bad arguments."""

import functools

import numpy as np
import pytest

import jax
import jax.numpy as jnp

import jaxnorm
from jaxnorm import reference
from jaxnorm._ops import linear_attention_parts
from jaxnorm.linear_attention import CHUNK

from cases import BF16, DTYPES, F16, F32, UNIT_ROUNDOFF, Tol, assert_close, to64

FLOATS = ["float32", "bfloat16", "float16"]
EPS = 1e-6

# Feature maps, each with the inputs that keep the normalizer away from 0 (phi > 0 everywhere).
FEATURE_MAPS = {
    "elu+1": ("elu+1", lambda rng, shape: rng.normal(size=shape)),
    "identity": ("identity", lambda rng, shape: np.abs(rng.normal(size=shape)) + 0.1),
    "relu+0.5": (lambda x: jax.nn.relu(x) + 0.5, lambda rng, shape: rng.normal(size=shape)),
    "exp": (lambda x: jnp.exp(x), lambda rng, shape: 0.5 * rng.normal(size=shape)),
}


def make(rng, batch, heads, length, d_k, d_v, dtype, feature_map="elu+1"):
    """q, k (drawn for `feature_map`), v ~ N(0, 1), BHLD."""
    dt = DTYPES[dtype]
    draw = FEATURE_MAPS[feature_map][1]
    shape = (batch, heads, length)
    q, k = (jnp.asarray(draw(rng, (*shape, d_k)), dt) for _ in range(2))
    v = jnp.asarray(rng.normal(size=(*shape, d_v)), dt)
    return q, k, v


def run(q, k, v, feature_map="elu+1", **kw):
    return jax.jit(lambda q, k, v: jaxnorm.linear_attention(
        q, k, v, feature_map=FEATURE_MAPS[feature_map][0], **kw))(q, k, v)


@functools.partial(jax.jit, static_argnames=("feature_map", "causal", "normalize", "recurrent"))
def expected_and_terms(q, k, v, feature_map="elu+1", *, causal=True, normalize=True, recurrent=False):
    """The reference in float64 (BHLD; the caller converts: one compilation serves every dtype),
    and elementwise the magnitude of the terms each output is computed from: sum_j |phi(q_i)|
    |phi(k_j)| |v_j| over the attended j, divided by the normalizer phi(q_i) . z_i + eps when
    normalizing (for phi > 0, |out_i| <= this). Both are linear in each operand, so the
    recurrent reference computes them for long sequences."""
    fm = FEATURE_MAPS[feature_map][0]
    qm, km = (reference.linear_attention_feature_map(x, fm) for x in (q, k))

    def attend(a, b, c):
        if recurrent:
            return reference.linear_attention_recurrent(a, b, c, feature_map="identity", normalize=False)[0]
        return reference.linear_attention(a, b, c, causal=causal, feature_map="identity", normalize=False)

    if recurrent:
        expected = reference.linear_attention_recurrent(q, k, v, feature_map=fm, normalize=normalize, eps=EPS)[0]
    else:
        expected = reference.linear_attention(q, k, v, causal=causal, feature_map=fm, normalize=normalize, eps=EPS)
    mag = attend(jnp.abs(qm), jnp.abs(km), jnp.abs(v))
    if normalize:
        mag = mag / (jnp.abs(attend(qm, km, jnp.ones((*v.shape[:-1], 1), jnp.float64))) + EPS)
    return expected, mag


def tolerance(dtype, length, d_k) -> Tol:
    """rel: the output rounded to its dtype (2u: a float32 value near a rounding boundary may
    round either way).

    terms, times the term magnitude (expected_and_terms):
    - float32 inputs are computed in float32 throughout: sums of up to len * d_k products
      (a score is d_k of them, then the state or the chunk adds up to len scores times v),
      whose independent roundings add up to about 2 sqrt(len d_k) u at three sigma, plus a few
      u for the division by the normalizer.
    - 16-bit inputs add rounding to the input dtype, u each: phi(q) and phi(k) (elu+1 is
      computed in float32 and rounded; a callable runs in the input dtype), and the CUDA
      kernel's chunk scores or state before their products with v and q. That is 3u of the
      numerator's terms; normalizing adds the normalizer's 2u (phi(q), phi(k)) times |out|,
      itself at most the term magnitude: 5u in all, a bound the random roundings do not reach
      (with the CUDA kernel's roundings emulated in the CPU handler, the worst error measured
      was 0.3 of this tolerance; float32's, 0.05).
    """
    u_out = UNIT_ROUNDOFF[np.dtype(dtype)]
    u_in = 0.0 if np.dtype(dtype) == F32 else u_out
    return Tol(rel=2 * u_out, terms=5 * u_in + 2.0**-24 * (32 + 2 * np.sqrt(max(1, length) * d_k)))


def check(got, q, k, v, feature_map="elu+1", *, causal=True, normalize=True, recurrent=False, what=""):
    assert got.dtype == q.dtype and got.shape == v.shape, (got.dtype, got.shape, q.dtype, v.shape)
    expected, mag = expected_and_terms(to64(q), to64(k), to64(v), feature_map, causal=causal, normalize=normalize,
                                       recurrent=recurrent)
    assert_close(got, expected, tol=tolerance(q.dtype, q.shape[2], q.shape[3]), mag=mag,
                 what=what or f"linear_attention {feature_map} causal={causal} normalize={normalize}")


def assert_close_scaled(got, want, tol, what=""):
    """|got - want| <= tol * max|want| elementwise (for gradients, whose terms mix signs)."""
    assert got.shape == want.shape, (what, got.shape, want.shape)
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    scale = float(np.abs(want).max()) if want.size else 0.0
    err = float(np.abs(got - want).max()) if got.size else 0.0
    assert np.isfinite(got).all() and err <= tol * scale, f"{what}: max error {err:.3g} > {tol} * {scale:.3g}"


# ----------------------------------------------------------------------------------------------
# Forward


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("feature_map", list(FEATURE_MAPS))
@pytest.mark.parametrize("normalize", [True, False], ids=["normalize", "unnormalized"])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
def test_forward_matches_reference(causal, normalize, feature_map, dtype, rng):
    q, k, v = make(rng, 3, 5, 65, 128, 64, dtype, feature_map)
    got = run(q, k, v, feature_map, causal=causal, normalize=normalize)
    check(got, q, k, v, feature_map, causal=causal, normalize=normalize)


# Every head dim as d_k and as d_v, equal and not, and every length around the kernel's
# CHUNK = 64 positions (1, 63, 64, 65, 130 = two chunks + 2).
SHAPES = [  # d_k, d_v, len
    (64, 32, 1), (64, 32, 63), (64, 32, 64), (64, 32, 65), (64, 32, 130),
    (32, 32, 65), (128, 128, 63), (256, 256, 130), (32, 256, 64), (256, 32, 65), (128, 64, 130), (64, 128, 1),
]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "dk{}-dv{}-len{}".format(*s))
def test_head_dims_and_lengths(shape, rng):
    d_k, d_v, length = shape
    q, k, v = make(rng, 3, 5, length, d_k, d_v, "float32")
    check(run(q, k, v), q, k, v)
    if length in (1, 130):  # the jnp form at every head dim pair: its shapes only
        check(run(q, k, v, causal=False), q, k, v, causal=False)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("dims", [(32, 256), (256, 32), (64, 64), (128, 128)], ids=lambda d: f"dk{d[0]}-dv{d[1]}")
def test_head_dims_16bit(dims, dtype, rng):
    d_k, d_v = dims
    for normalize in (True, False):
        q, k, v = make(rng, 5, 3, 130, d_k, d_v, dtype)
        check(run(q, k, v, normalize=normalize), q, k, v, normalize=normalize)


@pytest.mark.wide(cpu=True)
def test_long_sequence_matches_recurrent_reference(rng):
    # One row of 4096 positions: on a GPU the sequence is cut into parts whose states are summed.
    q, k, v = make(rng, 1, 1, 4096, 32, 32, "float32")
    assert linear_attention_parts(1, 4096, 32, 32) > 1
    for normalize in (True, False):
        check(run(q, k, v, normalize=normalize), q, k, v, normalize=normalize, recurrent=True)


@pytest.mark.wide
@pytest.mark.parametrize("dtype", FLOATS)
def test_long_sequences_every_dtype(dtype, rng):
    # Several rows of an odd length: the GPU's parts with a partial last chunk, two 64-wide
    # slices of v. (d_k 64 keeps float16's unnormalized sums of 4113 scores below its maximum.)
    q, k, v = make(rng, 2, 3, 4096 + 17, 64, 128, dtype)
    for normalize in (True, False):
        check(run(q, k, v, normalize=normalize), q, k, v, normalize=normalize, recurrent=True)


@pytest.mark.wide
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_64k_positions_16bit(dtype, rng):
    # 65536 positions in one row, normalized, against the float64 recurrence: the float32 state
    # carried over 1024 chunks and 32 parts, and float16's power-of-two scaling of the state,
    # whose sums grow with the length.
    q, k, v = make(rng, 1, 2, 65536, 64, 64, dtype)
    check(run(q, k, v), q, k, v, recurrent=True)


def test_parts_depend_on_shape_only():
    # The workspace's bound on the CUDA handler's parts: a function of the shapes alone.
    assert CHUNK == 64  # the lengths of SHAPES straddle it
    assert linear_attention_parts(1, 4096, 32, 32) == 32  # capped
    assert linear_attention_parts(1, 200, 64, 64) == 4  # one part per chunk at most
    assert linear_attention_parts(1, 1, 64, 64) == 1
    assert linear_attention_parts(1056, 100000, 64, 64) == 1  # the rows fill the GPU already
    assert linear_attention_parts(8, 100000, 64, 256) == 32  # 1056 / (8 rows * 4 slices of v) = 33, capped
    assert linear_attention_parts(8, 100000, 256, 256) == 17  # k_dim 256 takes v 32 columns at a time
    assert linear_attention_parts(64, 100000, 64, 64) == 17


def test_workspace_follows_vmap():
    # The parts (and so the workspace) are derived from the operands at lowering: vmap's folded
    # rows get the bound of 64 rows (17 parts), not the single row's 32 times 64.
    q = jnp.ones((64, 1, 1, 4096, 32), F32)
    text = jax.jit(jax.vmap(jaxnorm.linear_attention)).lower(q, q, q).as_text()
    assert f"tensor<{64 * 17 * 33 * 33}xf32>" in text, "workspace not sized from the folded rows"
    assert f"tensor<{64 * 32 * 33 * 33}xf32>" not in text


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
def test_blhd_is_bhld_transposed(causal, rng):
    q, k, v = make(rng, 3, 5, 70, 64, 32, "bfloat16")
    t = lambda x: jnp.swapaxes(x, 1, 2)  # noqa: E731
    got, (s, z) = run(t(q), t(k), t(v), causal=causal, layout="BLHD", return_state=True)
    expected, (s0, z0) = run(q, k, v, causal=causal, return_state=True)
    assert got.shape == (3, 70, 5, 32)
    np.testing.assert_array_equal(np.asarray(t(got), np.float32), np.asarray(expected, np.float32))
    np.testing.assert_array_equal(np.asarray(s), np.asarray(s0))
    np.testing.assert_array_equal(np.asarray(z), np.asarray(z0))


# ----------------------------------------------------------------------------------------------
# Gradients and transformations


def _loss(fn, ct, **kw):
    return lambda q, k, v: jnp.sum(fn(q, k, v, **kw).astype(ct.dtype) * ct)


# Relative to the gradient's largest element. float32: sums of up to len * d_k terms, and the
# normalized gradients' differences of such sums (measured: below 1e-6). 16-bit: the cotangent,
# phi, the saved output and each kernel's result are rounded to the input dtype (u each), and
# the normalized gradient (dnum - out * dden) / den cancels (measured: up to 3u, also with the
# CUDA kernel's rounded scores and state emulated on the CPU).
GRAD_TOL = {F32: 2e-5, BF16: 10 * UNIT_ROUNDOFF[BF16], F16: 10 * UNIT_ROUNDOFF[F16]}


def grads(fn, ct, argnums=(0, 1, 2), **kw):
    """jit(grad) of sum(fn(q, k, v) * ct): for jaxnorm, and for the reference on float64 inputs
    (jitted too: one compilation instead of one per jnp op)."""
    return jax.jit(jax.grad(_loss(fn, ct, **kw), argnums=argnums))


@pytest.mark.parametrize("feature_map", ["elu+1", "identity", "exp"])
@pytest.mark.parametrize("normalize", [True, False], ids=["normalize", "unnormalized"])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
def test_gradients_match_reference(causal, normalize, feature_map, rng):
    q, k, v = make(rng, 3, 1, 70, 64, 32, "float32", feature_map)
    ct = jnp.asarray(rng.normal(size=v.shape), jnp.float64)
    kw = dict(causal=causal, normalize=normalize, feature_map=FEATURE_MAPS[feature_map][0])
    got = grads(jaxnorm.linear_attention, ct, **kw)(q, k, v)
    expected = grads(reference.linear_attention, ct, **kw)(to64(q), to64(k), to64(v))
    for name, x, g, w in zip("qkv", (q, k, v), got, expected):
        assert g.dtype == x.dtype and g.shape == x.shape
        assert_close_scaled(g, w, GRAD_TOL[F32], f"d{name}")


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("normalize", [True, False], ids=["normalize", "unnormalized"])
def test_gradients_16bit(normalize, dtype, rng):
    q, k, v = make(rng, 1, 3, 130, 32, 64, dtype)
    ct = jnp.asarray(rng.normal(size=v.shape), jnp.float64)
    got = grads(jaxnorm.linear_attention, ct, normalize=normalize)(q, k, v)
    expected = grads(reference.linear_attention, ct, normalize=normalize)(to64(q), to64(k), to64(v))
    for name, x, g, w in zip("qkv", (q, k, v), got, expected):
        assert g.dtype == x.dtype
        assert_close_scaled(g, w, GRAD_TOL[x.dtype], f"d{name}")


def _jvps(fn, normalize):
    """jax.jvp in all three operands at once, then in each alone (the others symbolic zeros)."""
    f = lambda q, k, v: fn(q, k, v, normalize=normalize)  # noqa: E731

    @jax.jit
    def run(ops, tangents):
        out = jax.jvp(f, ops, tangents)
        single = [jax.jvp(lambda x, i=i: f(*(x if j == i else a for j, a in enumerate(ops))), (ops[i],),
                          (tangents[i],))[1] for i in range(3)]
        return out, single

    return run


@pytest.mark.parametrize("normalize", [True, False], ids=["normalize", "unnormalized"])
def test_jvp_matches_reference(normalize, rng):
    ops = make(rng, 3, 1, 70, 32, 64, "float32")
    tangents = tuple(jnp.asarray(rng.normal(size=x.shape), jnp.float32) for x in ops)
    (out, dout), single = _jvps(jaxnorm.linear_attention, normalize)(ops, tangents)
    (out_ref, dout_ref), single_ref = _jvps(reference.linear_attention, normalize)(
        tuple(map(to64, ops)), tuple(map(to64, tangents)))
    assert dout.dtype == F32
    assert_close_scaled(out, out_ref, GRAD_TOL[F32], "primal")
    assert_close_scaled(dout, dout_ref, GRAD_TOL[F32], "tangent")
    for name, d, d_ref in zip("qkv", single, single_ref):
        assert_close_scaled(d, d_ref, GRAD_TOL[F32], f"tangent in {name} only")


def test_jvp_float16_long_sequence(rng):
    # The tangents' unnormalized sums grow with the position (to ~6e4 here, past float16's range
    # near the end): the kernel returns them in float32, so the normalized tangent stays finite
    # and right. The tangent of v is a constant: its numerator is as large as the normalizer.
    ops = make(rng, 1, 2, 1500, 64, 64, "float16")
    tangents = (jnp.asarray(rng.normal(size=ops[0].shape), jnp.float16), jnp.zeros_like(ops[1]),
                jnp.ones_like(ops[2]))
    f = jax.jit(lambda o, t: jax.jvp(jaxnorm.linear_attention, o, t))
    _, dout = f(ops, tangents)
    _, dref = jax.jvp(reference.linear_attention, tuple(map(to64, ops)), tuple(map(to64, tangents)))
    assert dout.dtype == jnp.float16
    assert_close_scaled(dout, dref, GRAD_TOL[F16], "float16 tangent")


@pytest.mark.parametrize("normalize", [True, False], ids=["normalize", "unnormalized"])
def test_jacfwd_equals_reference_jacobian(normalize, rng):
    q, k, v = make(rng, 1, 1, 9, 32, 32, "float32")
    f = lambda fn: lambda q, k, v: fn(q, k, v, normalize=normalize)  # noqa: E731
    got, rev = jax.jit(lambda *a: (jax.jacfwd(f(jaxnorm.linear_attention), argnums=(0, 1, 2))(*a),
                                   jax.jacrev(f(jaxnorm.linear_attention), argnums=(0, 1, 2))(*a)))(q, k, v)
    expected = jax.jit(jax.jacrev(f(reference.linear_attention), argnums=(0, 1, 2)))(to64(q), to64(k), to64(v))
    for name, g, r, w in zip("qkv", got, rev, expected):
        assert_close_scaled(g, w, GRAD_TOL[F32], f"jacfwd d out / d {name}")
        assert_close_scaled(r, w, GRAD_TOL[F32], f"jacrev d out / d {name}")


@pytest.mark.parametrize("normalize", [True, False], ids=["normalize", "unnormalized"])
def test_second_order(normalize, rng):
    q, k, v = make(rng, 1, 2, 9, 32, 32, "float32")
    ct = jnp.asarray(rng.normal(size=v.shape), jnp.float64)

    def grad_norm(fn):
        g = jax.grad(lambda q, k, v: jnp.sum(jnp.sin(fn(q, k, v, normalize=normalize)) * ct), argnums=(0, 1, 2))
        return jax.jit(jax.grad(lambda q, k, v: sum(jnp.sum(x.astype(jnp.float64) ** 2) for x in g(q, k, v)),
                                argnums=(0, 1, 2)))

    got = grad_norm(jaxnorm.linear_attention)(q, k, v)
    expected = grad_norm(reference.linear_attention)(to64(q), to64(k), to64(v))
    # Several float32 kernels and products chained: a few times the first order's tolerance.
    for name, g, w in zip("qkv", got, expected):
        assert_close_scaled(g, w, 10 * GRAD_TOL[F32], f"second order d{name}")


def test_vmap_matches_loop(rng):
    n = 3
    q, k, v = make(rng, 2 * n, 3, 70, 64, 32, "float32")
    split = lambda x: x.reshape(n, 2, *x.shape[1:])  # noqa: E731
    qs, ks, vs = split(q), split(k), split(v)
    f = jax.jit(jaxnorm.linear_attention)
    got = jax.jit(jax.vmap(jaxnorm.linear_attention))(qs, ks, vs)
    for i in range(n):
        np.testing.assert_array_equal(np.asarray(got[i]), np.asarray(f(qs[i], ks[i], vs[i])))
    check(got.reshape(v.shape), q, k, v)
    # unbatched k, v shared by the batched queries
    got = jax.jit(jax.vmap(jaxnorm.linear_attention, in_axes=(0, None, None)))(qs, ks[0], vs[0])
    for i in range(n):
        np.testing.assert_array_equal(np.asarray(got[i]), np.asarray(f(qs[i], ks[0], vs[0])))
    # a non-leading batch axis
    got = jax.jit(jax.vmap(jaxnorm.linear_attention, in_axes=1, out_axes=1))(*(jnp.swapaxes(x, 0, 1) for x in (qs, ks, vs)))
    np.testing.assert_array_equal(np.asarray(jnp.swapaxes(got, 0, 1).reshape(v.shape)), np.asarray(f(q, k, v)))


def test_grad_of_vmap_and_vmap_of_grad(rng):
    n = 3
    q, k, v = (x.reshape(n, 1, *x.shape[1:]) for x in make(rng, n, 2, 70, 32, 64, "float32"))
    ct = jnp.asarray(rng.normal(size=v.shape), jnp.float64)

    def both(fn):
        loss = lambda q, k, v, c: jnp.sum(fn(q, k, v).astype(jnp.float64) * c)  # noqa: E731
        grad_of_vmap = jax.grad(lambda q, k, v: jnp.sum(jax.vmap(loss)(q, k, v, ct)), argnums=(0, 1, 2))
        vmap_of_grad = jax.vmap(jax.grad(loss, argnums=(0, 1, 2)))  # per-example gradients
        return jax.jit(lambda q, k, v: (grad_of_vmap(q, k, v), vmap_of_grad(q, k, v, ct)))

    got = both(jaxnorm.linear_attention)(q, k, v)
    expected = both(reference.linear_attention)(to64(q), to64(k), to64(v))
    for how, gs, ws in zip(("grad of vmap", "vmap of grad"), got, expected):
        for name, g, w in zip("qkv", gs, ws):
            assert_close_scaled(g, w, GRAD_TOL[F32], f"{how} d{name}")


def test_jit_equals_eager(rng):
    q, k, v = make(rng, 3, 5, 65, 64, 64, "bfloat16")
    eager = jaxnorm.linear_attention(q, k, v)
    np.testing.assert_array_equal(np.asarray(run(q, k, v), np.float32), np.asarray(eager, np.float32))


# ----------------------------------------------------------------------------------------------
# The state and the recurrent step


@functools.partial(jax.jit, static_argnames="feature_map")
def state_and_terms(k, v, feature_map="elu+1"):
    """reference.linear_attention_state in float64, and the magnitudes of the terms of S and z."""
    fm = FEATURE_MAPS[feature_map][0]
    km = jnp.abs(reference.linear_attention_feature_map(k, fm))
    return reference.linear_attention_state(k, v, fm), (jnp.einsum("bhlk,bhlv->bhkv", km, jnp.abs(v)), km.sum(axis=2))


def check_state(state, k, v, feature_map="elu+1"):
    """(S, z) against the reference: float32 sums of len terms; with 16-bit inputs each term
    also carries phi(k) rounded to the input dtype (u; 2u allowed)."""
    (s_ref, z_ref), (s_mag, z_mag) = state_and_terms(to64(k), to64(v), feature_map)
    u = 0.0 if k.dtype == F32 else UNIT_ROUNDOFF[np.dtype(k.dtype)]
    tol = Tol(rel=0.0, terms=2 * u + 2.0**-24 * (32 + 2 * np.sqrt(k.shape[2])))
    assert state[0].dtype == state[1].dtype == F32
    assert_close(state[0], s_ref, tol=tol, mag=np.asarray(s_mag), what="S")
    assert_close(state[1], z_ref, tol=tol, mag=np.asarray(z_mag), what="z")


@pytest.mark.parametrize("feature_map", ["elu+1", "relu+0.5"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_return_state_matches_reference(dtype, feature_map, rng):
    q, k, v = make(rng, 3, 5, 65, 64, 32, dtype, feature_map)
    out, (s, z) = run(q, k, v, feature_map, return_state=True)
    np.testing.assert_array_equal(np.asarray(out, np.float32), np.asarray(run(q, k, v, feature_map), np.float32))
    assert s.shape == (3, 5, 64, 32) and z.shape == (3, 5, 64)
    check_state((s, z), k, v, feature_map)


@pytest.mark.parametrize("normalize", [True, False], ids=["normalize", "unnormalized"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_steps_continue_the_parallel_form(dtype, normalize, rng):
    prefix, steps = 65, 4
    q, k, v = make(rng, 3, 5, prefix + steps, 64, 32, dtype)

    @jax.jit
    def parallel_then_steps(q, k, v):
        full = jaxnorm.linear_attention(q, k, v, normalize=normalize)
        _, state = jaxnorm.linear_attention(q[:, :, :prefix], k[:, :, :prefix], v[:, :, :prefix],
                                            normalize=normalize, return_state=True)
        outs = []
        for t in range(prefix, prefix + steps):
            out, state = jaxnorm.linear_attention_step(q[:, :, t], k[:, :, t], v[:, :, t], state, normalize=normalize)
            outs.append(out)
        return jnp.stack(outs, axis=2), state, full[:, :, prefix:]

    got, state, full = parallel_then_steps(q, k, v)
    assert got.dtype == q.dtype and got.shape == (3, 5, steps, 32)
    # the reference at those positions, and jaxnorm's parallel form
    expected, mag = (x[:, :, prefix:] for x in expected_and_terms(to64(q), to64(k), to64(v), normalize=normalize))
    tol = tolerance(q.dtype, prefix + steps, 64)
    assert_close(got, expected, tol=tol, mag=mag, what="steps")
    assert_close(got, full.astype(jnp.float64), tol=Tol(2 * tol.rel, 2 * tol.terms), mag=mag, what="steps vs parallel")
    check_state(state, k, v)  # the state after the steps is the whole sequence's


@pytest.mark.parametrize("feature_map", ["elu+1", "identity", "exp"])
def test_step_from_zero_state_is_length_one_attention(feature_map, rng):
    q, k, v = make(rng, 3, 5, 1, 32, 64, "float32", feature_map)
    fm = FEATURE_MAPS[feature_map][0]
    zero = (jnp.zeros((3, 5, 32, 64), F32), jnp.zeros((3, 5, 32), F32))
    out, state = jax.jit(lambda q, k, v, s: jaxnorm.linear_attention_step(q, k, v, s, feature_map=fm))(
        q[:, :, 0], k[:, :, 0], v[:, :, 0], zero)
    one = run(q, k, v, feature_map)[:, :, 0]
    np.testing.assert_allclose(np.asarray(out), np.asarray(one), rtol=1e-5, atol=1e-7)
    # phi(q) . phi(k) v / (phi(q) . phi(k) + eps): v itself up to eps
    np.testing.assert_allclose(np.asarray(out), np.asarray(v[:, :, 0]), rtol=1e-4, atol=1e-5)
    check_state(state, k, v, feature_map)


def _random_features(x):
    """A map that doubles the width (d_k -> 2 d_k, positive), as random-feature maps change it."""
    return jnp.concatenate([jax.nn.relu(x), jax.nn.relu(-x)], axis=-1) + 0.1


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
def test_feature_map_that_changes_the_width(causal, rng):
    q, k, v = make(rng, 2, 3, 70, 32, 64, "float32")
    out, (s, z) = jax.jit(lambda q, k, v: jaxnorm.linear_attention(
        q, k, v, causal=causal, feature_map=_random_features, return_state=True))(q, k, v)
    want = reference.linear_attention(to64(q), to64(k), to64(v), causal=causal, feature_map=_random_features, eps=EPS)
    assert out.shape == v.shape and s.shape == (2, 3, 64, 64) and z.shape == (2, 3, 64)
    # phi > 0.1 everywhere, so |out| is bounded by max |v| and the sums are of like-signed terms.
    np.testing.assert_allclose(np.asarray(out), np.asarray(want), rtol=2e-5, atol=2e-5)
    # the state continues the sequence step by step with the same map
    q1, k1, v1 = make(rng, 2, 3, 1, 32, 64, "float32")
    step, _ = jaxnorm.linear_attention_step(q1[:, :, 0], k1[:, :, 0], v1[:, :, 0], (s, z), feature_map=_random_features)
    if causal:
        whole = reference.linear_attention(*(to64(jnp.concatenate([a, b], axis=2)) for a, b in ((q, q1), (k, k1), (v, v1))),
                                           feature_map=_random_features, eps=EPS)
        np.testing.assert_allclose(np.asarray(step), np.asarray(whole[:, :, -1]), rtol=2e-5, atol=2e-5)
    # a width the kernels do not take, and a map that changes the leading axes, say so
    with pytest.raises(ValueError, match=r"d_k \(feature_map's width\) must be one of"):
        jaxnorm.linear_attention(q, k, v, causal=causal, feature_map=lambda x: jnp.concatenate([x, x[..., :1]], -1))
    with pytest.raises(ValueError, match="`feature_map` must map q and k"):
        jaxnorm.linear_attention(q, k, v, causal=causal, feature_map=lambda x: x[:, :, :1])


# ----------------------------------------------------------------------------------------------
# Determinism, lowering, edge cases


def test_reproducible(rng):
    # Long enough that the GPU cuts the sequences into parts (their states summed in a fixed order).
    q, k, v = make(rng, 1, 2, 1000, 64, 64, "bfloat16")
    ct = jnp.asarray(rng.normal(size=v.shape), jnp.float32)
    f = jax.jit(jaxnorm.linear_attention)
    g = jax.jit(jax.grad(_loss(jaxnorm.linear_attention, ct), argnums=(0, 1, 2)))
    first = [np.asarray(x, np.float32).tobytes() for x in (f(q, k, v), *g(q, k, v))]
    for _ in range(2):
        assert [np.asarray(x, np.float32).tobytes() for x in (f(q, k, v), *g(q, k, v))] == first


def test_lowered_hlo_holds_the_custom_call(rng):
    q, k, v = make(rng, 2, 3, 70, 64, 32, "float32")
    ct = jnp.asarray(rng.normal(size=v.shape), jnp.float32)
    target = "@jaxnorm_linear_attention"
    assert jax.jit(jaxnorm.linear_attention).lower(q, k, v).as_text().count(target) == 1
    # The backward runs the kernel: one call per operand's gradient besides the forward.
    grad = jax.jit(jax.grad(_loss(jaxnorm.linear_attention, ct), argnums=(0, 1, 2))).lower(q, k, v).as_text()
    assert grad.count(target) >= 4
    # Unnormalized, the output is linear in v: its gradient is the kernel alone, summing backwards.
    dv = jax.jit(jax.grad(_loss(jaxnorm.linear_attention, ct, normalize=False), argnums=2)).lower(q, k, v).as_text()
    assert dv.count(target) == 1 and "reverse = true" in dv
    # The non-causal form is two jnp matrix products: no custom call, forward or backward.
    full = lambda q, k, v: jaxnorm.linear_attention(q, k, v, causal=False)  # noqa: E731
    assert "jaxnorm_linear_attention" not in jax.jit(full).lower(q, k, v).as_text()
    assert "jaxnorm_linear_attention" not in jax.jit(jax.grad(_loss(full, ct), argnums=(0, 1, 2))).lower(q, k, v).as_text()


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("shape", [(0, 3, 5), (2, 3, 0), (2, 0, 7)], ids=lambda s: "x".join(map(str, s)))
def test_empty(shape, causal):
    batch, heads, length = shape
    q = k = jnp.ones((batch, heads, length, 32), F32)
    v = jnp.ones((batch, heads, length, 64), F32)
    out, (s, z) = jax.jit(lambda q, k, v: jaxnorm.linear_attention(q, k, v, causal=causal, return_state=True))(q, k, v)
    assert out.shape == (batch, heads, length, 64) and out.dtype == F32
    assert s.shape == (batch, heads, 32, 64) and z.shape == (batch, heads, 32)
    np.testing.assert_array_equal(np.asarray(s), 0)
    blhd = jaxnorm.linear_attention(*(jnp.swapaxes(x, 1, 2) for x in (q, k, v)), causal=causal, layout="BLHD")
    assert blhd.shape == (batch, length, heads, 64)
    grads = jax.jit(jax.grad(lambda q, k, v: jnp.sum(jaxnorm.linear_attention(q, k, v, causal=causal)),
                             argnums=(0, 1, 2)))(q, k, v)
    assert [g.shape for g in grads] == [q.shape, k.shape, v.shape]


def test_vmap_over_an_empty_axis():
    q = jnp.ones((0, 2, 3, 5, 32), F32)
    out = jax.vmap(jaxnorm.linear_attention)(q, q, q)
    assert out.shape == q.shape and out.dtype == F32
    g = jax.vmap(jax.grad(lambda q: jnp.sum(jaxnorm.linear_attention(q, q, q))))(q)
    assert g.shape == q.shape


@pytest.mark.parametrize("change,exc,match", [
    (dict(q=jnp.zeros((3, 8, 64), F32), k=jnp.zeros((3, 8, 64), F32), v=jnp.zeros((3, 8, 32), F32)), ValueError, "rank 4"),
    (dict(v=jnp.zeros((2, 3, 8), F32)), ValueError, "rank 4"),
    (dict(k=jnp.zeros((2, 3, 9, 64), F32)), ValueError, "`k` must have q's shape"),
    (dict(k=jnp.zeros((2, 3, 8, 32), F32)), ValueError, "`k` must have q's shape"),
    (dict(v=jnp.zeros((2, 1, 8, 32), F32)), ValueError, "`v` must share q's batch"),
    (dict(q=jnp.zeros((2, 3, 8, 48), F32), k=jnp.zeros((2, 3, 8, 48), F32)), ValueError, "d_k must be one of"),
    (dict(v=jnp.zeros((2, 3, 8, 512), F32)), ValueError, "d_v must be one of"),
    (dict(k=jnp.zeros((2, 3, 8, 64), BF16)), TypeError, "`k` must have q's dtype"),
    (dict(v=jnp.zeros((2, 3, 8, 32), F16)), TypeError, "`v` must have q's dtype"),
    (dict(q=jnp.zeros((2, 3, 8, 64), jnp.int32), k=jnp.zeros((2, 3, 8, 64), jnp.int32),
          v=jnp.zeros((2, 3, 8, 32), jnp.int32)), TypeError, "`q` must be float32, bfloat16 or float16"),
    (dict(q=jnp.zeros((2, 3, 8, 64), jnp.float64), k=jnp.zeros((2, 3, 8, 64), jnp.float64),
          v=jnp.zeros((2, 3, 8, 32), jnp.float64)), TypeError, "`q` must be float32"),
    (dict(k=jnp.zeros((2, 3, 8, 64), jnp.int32)), TypeError, "`k` must have q's dtype"),
    (dict(layout="BSHD"), ValueError, "`layout`"),
    (dict(layout="BLHD", v=jnp.zeros((2, 3, 7, 32), F32)), ValueError, r"`v` must share.*BLHD"),
    (dict(feature_map="relu"), ValueError, "`feature_map`"),
    (dict(feature_map=None), ValueError, "`feature_map`"),
    (dict(eps=-1e-6), ValueError, "`eps`"),
    (dict(eps=float("nan")), ValueError, "`eps`"),
    (dict(eps="1e-6"), TypeError, "`eps` must be a Python float"),
    (dict(eps=True), TypeError, "`eps` must be a Python float"),
    (dict(eps=jnp.zeros((2,), F32)), TypeError, "`eps` must be a Python float"),
    # Flags are Python bools: "False" would read as True.
    (dict(causal="False"), TypeError, "`causal` must be a Python bool"),
    (dict(normalize="False"), TypeError, "`normalize` must be a Python bool"),
    (dict(return_state="no"), TypeError, "`return_state` must be a Python bool"),
    (dict(causal=1), TypeError, "`causal` must be a Python bool"),
])
def test_bad_arguments(change, exc, match):
    args = dict(q=jnp.zeros((2, 3, 8, 64), F32), k=jnp.zeros((2, 3, 8, 64), F32), v=jnp.zeros((2, 3, 8, 32), F32))
    args.update(change)
    arrays = {n: a for n, a in args.items() if hasattr(a, "shape")}
    static = {n: a for n, a in args.items() if not hasattr(a, "shape")}
    with pytest.raises(exc, match=match):
        jax.jit(lambda a: jaxnorm.linear_attention(**a, **static)).lower(arrays)


@pytest.mark.parametrize("change,exc,match", [
    (dict(state=(jnp.zeros((2, 3, 64, 64), F32), jnp.zeros((2, 3, 64), F32))), ValueError, "`state` must be"),
    (dict(state=(jnp.zeros((2, 3, 64, 32), F32), jnp.zeros((2, 3, 32), F32))), ValueError, "`state` must be"),
    (dict(state=(jnp.zeros((1, 3, 64, 32), F32), jnp.zeros((1, 3, 64), F32))), ValueError, "`state` must be"),
    (dict(state=jnp.zeros((2, 3, 64, 32), F32)), ValueError, "`state` must be"),  # unpacks along batch
    (dict(state=(jnp.zeros((2, 3, 64, 32), F32),)), TypeError, "`state` must be a pair"),
    (dict(state=None), TypeError, "`state` must be a pair"),
    (dict(q=jnp.zeros((2, 3, 1, 64), F32)), ValueError, r"\[batch, heads, d_k\]"),
    (dict(k=jnp.zeros((2, 3, 32), F32)), ValueError, r"\[batch, heads, d_k\]"),
    (dict(v=jnp.zeros((2, 4, 32), F32)), ValueError, r"\[batch, heads, d_k\]"),
    (dict(k=jnp.zeros((2, 3, 64), BF16)), TypeError, "`k` must have q's dtype"),
    (dict(feature_map="softmax"), ValueError, "`feature_map`"),
    (dict(eps=-1.0), ValueError, "`eps`"),
    (dict(eps="0"), TypeError, "`eps` must be a Python float"),
    (dict(normalize="False"), TypeError, "`normalize` must be a Python bool"),
])
def test_step_bad_arguments(change, exc, match):
    args = dict(q=jnp.zeros((2, 3, 64), F32), k=jnp.zeros((2, 3, 64), F32), v=jnp.zeros((2, 3, 32), F32),
                state=(jnp.zeros((2, 3, 64, 32), F32), jnp.zeros((2, 3, 64), F32)))
    args.update(change)
    static = {n: args.pop(n) for n in ("feature_map", "eps", "normalize") if n in args}
    with pytest.raises(exc, match=match):
        jax.jit(lambda a: jaxnorm.linear_attention_step(**a, **static)).lower(args)


@pytest.mark.parametrize("change,message", [
    (dict(v=jnp.zeros((2, 7, 4, 64), F32)), "`v` must share q's batch, len and heads (2, 8, 4), got shape (2, 7, 4, 64) (BLHD)"),
    (dict(k=jnp.zeros((2, 8, 4, 64), F32)), "`k` must have q's shape (2, 8, 4, 32), got (2, 8, 4, 64) (BLHD)"),
    (dict(v=jnp.zeros((2, 8, 4, 48), F32)), "d_v must be one of (32, 64, 128, 256), got 48 (shapes q (2, 8, 4, 32), "
                                            "v (2, 8, 4, 48) (BLHD)"),
])
def test_blhd_errors_name_the_shapes_given(change, message):
    args = dict(q=jnp.zeros((2, 8, 4, 32), F32), k=jnp.zeros((2, 8, 4, 32), F32), v=jnp.zeros((2, 8, 4, 64), F32))
    args.update(change)
    with pytest.raises(ValueError) as e:
        jaxnorm.linear_attention(**args, layout="BLHD")
    assert message in str(e.value)


def test_float16_gradients_of_a_small_loss(rng):
    """The normalized output's numerator cotangent ct / (den + eps) shrinks as den grows with the
    position: rounded to float16 as it was, it underflowed (dv 79% zeros and 25-39% off at 2048
    positions with a loss of 1e-3 * sum). Against the float64 reference with
    test_gradients_16bit's tolerance."""
    q, k, v = make(rng, 1, 1, 2048, 64, 64, "float16")
    loss = lambda f: lambda q, k, v: 1e-3 * jnp.sum(f(q, k, v).astype(jnp.float32))  # noqa: E731
    got = jax.grad(loss(jaxnorm.linear_attention), (0, 1, 2))(q, k, v)
    expected = jax.grad(loss(reference.linear_attention), (0, 1, 2))(to64(q), to64(k), to64(v))
    for name, x, g, w in zip("qkv", (q, k, v), got, expected):
        assert g.dtype == x.dtype
        assert_close_scaled(g, w, GRAD_TOL[x.dtype], f"d{name}")


def test_reference_causal_form_reads_no_later_position():
    """A non-finite v at position 2 reaches positions 2 and 3 only, as in the recurrence (the
    quadratic form had multiplied the masked scores' zeros by it). The CPU kernel walks the
    positions, as the recurrence does. The GPU kernels take chunks of 32 or 64 positions and
    multiply each chunk's masked scores, zeros, by its v (tensor cores cannot skip them), so there
    the NaN also reaches the earlier positions of its chunk (README, Limitations) and only the
    later ones are checked."""
    q = jnp.ones((1, 1, 4, 32), F32)
    v = jnp.zeros((1, 1, 4, 32), F32).at[0, 0, 2, 0].set(jnp.nan)
    for fn in (reference.linear_attention, lambda *a: reference.linear_attention_recurrent(*a)[0]):
        bad = np.isnan(np.asarray(fn(q, q, v))[0, 0, :, 0])
        assert bad.tolist() == [False, False, True, True], fn
    bad = np.isnan(np.asarray(jaxnorm.linear_attention(q, q, v))[0, 0, :, 0])
    assert bad[2:].all()
    if jax.default_backend() == "cpu":
        assert not bad[:2].any()
