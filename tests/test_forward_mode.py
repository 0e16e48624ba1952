"""Forward-mode and higher-order derivatives of every differentiable op: jax.jvp against the
reference's jvp (float64), jacfwd against jacrev, Hessian-vector products and Hessians against the
reference's, vmap of jvp, and that reverse mode still runs the backward kernels (the tangent maps
transpose into them)."""

import numpy as np
import pytest

import jax
import jax.numpy as jnp

import jaxnorm
from jaxnorm import reference
from cases import BF16, F32, LAYER_NORM, NORMS, OPS, RMS_NORM, SOFTMAXES, make_params, make_x, op_params, to64

# float32: the kernels' float32 arithmetic over rows of ~40 (a few ulps of the row's terms);
# bfloat16: the tangent rounded once to bfloat16 (2^-8) plus the forward's rounding of y.
TOL = {F32: 2e-5, BF16: 3e-2}


def assert_close(got, want, tol, what=""):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    scale = max(1.0, float(np.abs(want).max()))
    err = float(np.abs(got - want).max()) if got.size else 0.0
    assert err <= tol * scale, f"{what}: max error {err:.3g} > {tol} * {scale:.3g}"


def inputs(op, rng, shape, dtype, memory_efficient=False):
    x = make_x(op, rng, shape, dtype)
    params = make_params(op, rng, shape[-1:], F32, bounded_scale=memory_efficient)
    tangents = [jnp.asarray(rng.normal(size=a.shape), a.dtype) for a in (x, *params)]
    return x, params, tangents


def kwargs(op, memory_efficient):
    return {"memory_efficient": memory_efficient} if op.is_norm else {}


def variants():
    return pytest.mark.parametrize(
        "op,memory_efficient", [(op, me) for op in OPS for me in ((False, True) if op.is_norm else (False,))],
        ids=lambda v: str(v) if not isinstance(v, bool) else ("memory_efficient" if v else "default"))


@variants()
@pytest.mark.parametrize("dtype", [F32, BF16], ids=str)
def test_jvp_matches_reference(op, memory_efficient, dtype, rng):
    x, params, tangents = inputs(op, rng, (5, 3, 41), dtype, memory_efficient)
    f = jax.jit(lambda x, *p: op.fn(x, *p, **kwargs(op, memory_efficient)))
    y, dy = jax.jvp(f, (x, *params), tuple(tangents))
    y_ref, dy_ref = jax.jvp(op.ref, tuple(to64(a) for a in (x, *params)), tuple(to64(t) for t in tangents))
    assert dy.dtype == x.dtype
    assert_close(y, y_ref, TOL[dtype], "primal")
    assert_close(dy, dy_ref, TOL[dtype], "tangent")


@pytest.mark.parametrize("op", SOFTMAXES, ids=str)
def test_jvp_with_mask(op, rng):
    x, _, (dx,) = inputs(op, rng, (4, 37), F32)
    where = jnp.asarray(rng.uniform(size=x.shape) > 0.3)
    _, dy = jax.jvp(lambda x: op.fn(x, where=where), (x,), (dx,))
    _, dy_ref = jax.jvp(lambda x: op.ref(x, where=where), (to64(x),), (to64(dx),))
    assert_close(jnp.where(where, dy, 0), jnp.where(where, dy_ref, 0), TOL[F32])
    assert not np.asarray(jnp.where(where, 0, dy)).any()  # masked outputs are constant


@op_params(NORMS)
def test_jvp_in_parameters_only(op, rng):
    """Tangents in scale (and bias) only: x's tangent is a symbolic zero."""
    x, params, tangents = inputs(op, rng, (6, 40), F32)
    _, dy = jax.jvp(lambda *p: op.fn(x, *p), tuple(params), tuple(tangents[1:]))
    _, dy_ref = jax.jvp(lambda *p: op.ref(to64(x), *p), tuple(to64(p) for p in params), tuple(to64(t) for t in tangents[1:]))
    assert_close(dy, dy_ref, TOL[F32])


@variants()
def test_jacfwd_equals_jacrev(op, memory_efficient, rng):
    x, params, _ = inputs(op, rng, (3, 17), F32, memory_efficient)
    f = lambda x, *p: op.fn(x, *p, **kwargs(op, memory_efficient))
    argnums = tuple(range(1 + len(params)))
    fwd = jax.jacfwd(f, argnums=argnums)(x, *params)
    rev = jax.jacrev(f, argnums=argnums)(x, *params)
    for a, b in zip(fwd, rev):
        assert_close(a, b, TOL[F32])


@variants()
def test_hessian_vector_product(op, memory_efficient, rng):
    """jvp of grad: forward mode over the backward kernel, against the reference's."""
    x, params, tangents = inputs(op, rng, (4, 29), F32, memory_efficient)
    w = jnp.asarray(rng.normal(size=x.shape), F32)

    def loss(fn, **kw):
        return lambda x, *p: jnp.sum(jnp.sin(fn(x, *p, **kw)) * w)

    argnums = tuple(range(1 + len(params)))
    grad = jax.grad(loss(op.fn, **kwargs(op, memory_efficient)), argnums=argnums)
    grad_ref = jax.grad(loss(op.ref), argnums=argnums)
    _, hvp = jax.jvp(grad, (x, *params), tuple(tangents))
    _, hvp_ref = jax.jvp(grad_ref, tuple(to64(a) for a in (x, *params)), tuple(to64(t) for t in tangents))
    for a, b in zip(hvp, hvp_ref):
        assert_close(a, b, 1e-4)


@pytest.mark.parametrize("op", OPS, ids=str)
def test_hessian(op, rng):
    x, params, _ = inputs(op, rng, (2, 9), F32)
    h = jax.hessian(lambda x: jnp.sum(op.fn(x, *params) ** 3))(x)
    h_ref = jax.hessian(lambda x: jnp.sum(op.ref(x, *(to64(p) for p in params)) ** 3))(to64(x))
    assert_close(h, h_ref, 1e-4)


@pytest.mark.parametrize("op", OPS, ids=str)
def test_vmap_of_jvp(op, rng):
    x, params, (dx, *_) = inputs(op, rng, (3, 5, 33), F32)
    f = lambda x, dx: jax.jvp(lambda x: op.fn(x, *params), (x,), (dx,))[1]
    got = jax.vmap(f)(x, dx)
    want = jnp.stack([f(x[i], dx[i]) for i in range(3)])
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("op", OPS, ids=str)
def test_checkpointed_grad(op, rng):
    x, params, _ = inputs(op, rng, (4, 31), F32)
    loss = lambda x, *p: jnp.sum(jnp.tanh(op.fn(x, *p)))
    plain = jax.grad(loss)(x, *params)
    remat = jax.grad(jax.checkpoint(loss))(x, *params)
    np.testing.assert_array_equal(np.asarray(plain), np.asarray(remat))


@pytest.mark.parametrize("op", OPS, ids=str)
def test_reverse_mode_runs_the_backward_kernel(op, rng):
    x, params, _ = inputs(op, rng, (4, 64), F32)
    family = "norm" if op.is_norm else "softmax"
    grad_hlo = jax.jit(jax.grad(lambda x, *p: jnp.sum(op.fn(x, *p) ** 2), argnums=(0,))).lower(x, *params).as_text()
    assert f"@jaxnorm_{family}_bwd(" in grad_hlo
    jvp_hlo = jax.jit(lambda x, dx: jax.jvp(lambda x: op.fn(x, *params), (x,), (dx,))).lower(x, x).as_text()
    assert f"@jaxnorm_{family}_fwd(" in jvp_hlo


def _embed_ref(table, pos_table, ids, position):
    return reference.embed_with_position(ids, table, position=position, pos_table=pos_table)


@pytest.mark.parametrize("with_pos_table", [False, True], ids=["sine", "pos_table"])
def test_embedding_jvp_and_second_order(with_pos_table, rng):
    vocab, d, max_pos = 11, 8, 7
    table = jnp.asarray(rng.normal(size=(vocab, d)), F32)
    pos_table = jnp.asarray(rng.normal(size=(max_pos, d)), F32) if with_pos_table else None
    ids = jnp.asarray(rng.integers(-2, vocab + 2, size=(3, 5)), jnp.int32)  # some clamped
    position = jnp.asarray(rng.integers(0, max_pos, size=(3, 5)), jnp.int32)
    f = lambda t, pt: jaxnorm.embed_with_position(ids, t, position=position, pos_table=pt)
    ref = lambda t, pt: _embed_ref(t, pt, ids, position)
    primals = (table, pos_table) if with_pos_table else (table,)
    tangents = tuple(jnp.asarray(rng.normal(size=a.shape), F32) for a in primals)
    g = (lambda *a: f(*a)) if with_pos_table else (lambda t: f(t, None))
    g_ref = (lambda *a: ref(*a)) if with_pos_table else (lambda t: ref(t, None))
    _, dy = jax.jvp(g, primals, tangents)
    _, dy_ref = jax.jvp(g_ref, primals, tangents)
    assert_close(dy, dy_ref, 1e-6)
    argnums = tuple(range(len(primals)))
    for a, b in zip(jax.jacfwd(g, argnums=argnums)(*primals), jax.jacrev(g, argnums=argnums)(*primals)):
        assert_close(a, b, 1e-6)
    loss = lambda fn: lambda *a: jnp.sum(jnp.sin(fn(*a)))
    _, hvp = jax.jvp(jax.grad(loss(g), argnums=argnums), primals, tangents)
    _, hvp_ref = jax.jvp(jax.grad(loss(g_ref), argnums=argnums), primals, tangents)
    for a, b in zip(hvp, hvp_ref):
        assert_close(a, b, 1e-5)
    hlo = jax.jit(jax.grad(loss(g), argnums=argnums)).lower(*primals).as_text()
    assert "@jaxnorm_embed_bwd(" in hlo


@pytest.mark.parametrize(
    "name, fn",
    [
        ("rms_norm, no scale", lambda x, t: jaxnorm.rms_norm(x)),
        ("layer_norm, no scale or bias", lambda x, t: jaxnorm.layer_norm(x)),
        ("layer_norm, memory-efficient", lambda x, t: jaxnorm.layer_norm(x, memory_efficient=True)),
        ("softmax, no mask", lambda x, t: jaxnorm.softmax(x)),
        ("embed_with_position, no pos table",
         lambda x, t: jaxnorm.embed_with_position(jnp.array([3, 1, 4]), t, position=jnp.array([0, 1, 2]))),
    ],
)
def test_reverse_mode_saves_no_empty_residual(name, fn, rng):
    """Absent optional operands (empty placeholders) are never saved for the backward pass: a
    zero-size residual crossing a shard_map boundary crashes Shardy in jax 0.11."""
    x = jnp.asarray(rng.normal(size=(6, 32)), F32)
    table = jnp.asarray(rng.normal(size=(8, 32)), F32)
    _, pullback = jax.vjp(fn, x, table)
    empty = [r.shape for r in jax.tree.leaves(pullback) if hasattr(r, "shape") and r.size == 0]
    assert not empty, (name, empty)
