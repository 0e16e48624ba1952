"""Residual-add + norm (`residual=`, `residual_dtype=`) and the zero-centred scale
(`scale_offset=`): forward, every gradient, forward mode and the transforms against the float64
reference, and the argument checks."""

import numpy as np
import pytest

import jax
import jax.numpy as jnp

from cases import (
    BF16, DTYPES, F32, LAYER_NORM, NORMS, as_f64, assert_close, make_cotangent, make_x,
    op_params, result_tolerance, term_magnitudes, to64,
)


def _params(op, rng, cols, dtype, *, offset=0.0, bounded=False):
    """Scale (and bias) for op. With an offset the scale is centred on zero as Gemma stores it;
    bounded keeps the applied scale's magnitude in [0.5, 1.5] (memory-efficient mode divides by it)."""
    if offset:
        scale = 0.2 * rng.normal(size=cols)
    elif bounded:
        scale = rng.uniform(0.5, 1.5, size=cols) * rng.choice([-1.0, 1.0], size=cols)
    else:
        scale = rng.normal(size=cols)
    params = [jnp.asarray(scale, dtype)]
    if op is LAYER_NORM:
        params.append(jnp.asarray(rng.normal(size=cols), dtype))
    return tuple(params)


def _vjp(fn, x, r, params, ct_y, ct_h, kw):
    """fn's (y, h) and the gradients in (x, r, *params); ct_h None: h is discarded (a symbolic
    zero cotangent)."""
    if ct_h is None:
        y, pull = jax.vjp(lambda x, r, *p: fn(x, *p, residual=r, **kw)[0], x, r, *params)
        return (y, fn(x, *params, residual=r, **kw)[1]), pull(ct_y)
    out, pull = jax.vjp(lambda x, r, *p: fn(x, *p, residual=r, **kw), x, r, *params)
    return out, pull((ct_y, ct_h))


def run_add_norm(op, x, r, params, ct_y, ct_h, **kw):
    """(actual, expected) as cases.run_both: the reference in float64 with h rounded to the
    kernel's h dtype (the spec: y is the norm of h as stored)."""
    h_dtype = np.dtype(kw.get("residual_dtype") or x.dtype)
    ref_kw = {k: v for k, v in kw.items() if k != "memory_efficient"}
    ref_kw["residual_dtype"] = h_dtype

    @jax.jit
    def run(x, r, params, ct_y, ct_h):
        actual = _vjp(op.fn, x, r, params, ct_y, ct_h, kw)
        # h has its dtype in the reference too, and so has its cotangent.
        expected = _vjp(op.ref, to64(x), to64(r), tuple(map(to64, params)), to64(ct_y), ct_h, ref_kw)
        return actual, expected

    return run(x, r, tuple(params), ct_y, ct_h)


def check_add_norm(op, rng, shape, dtype, *, r_dtype=None, use_h=True, offset=0.0, memory_efficient=False,
                   residual_dtype=None, param_dtype=None):
    dtype = np.dtype(dtype)
    r_dtype = np.dtype(r_dtype or residual_dtype or dtype)
    x = make_x(op, rng, shape, dtype)
    r = jnp.asarray(rng.normal(size=shape), r_dtype)
    cols = shape[-1]
    params = _params(op, rng, cols, param_dtype or dtype, offset=offset, bounded=memory_efficient)
    ct_y = make_cotangent(rng, x)
    h_dtype = np.dtype(residual_dtype or dtype)
    ct_h = jnp.asarray(rng.normal(size=shape), h_dtype) if use_h else None
    kw = dict(memory_efficient=memory_efficient, scale_offset=offset)
    if residual_dtype is not None:
        kw["residual_dtype"] = residual_dtype
    ((y, h), grads), ((y_ref, h_ref), grads_ref) = run_add_norm(op, x, r, params, ct_y, ct_h, **kw)

    assert y.dtype == dtype and h.dtype == h_dtype, (y.dtype, h.dtype)
    # h = x + r rounded once to its dtype: a float32 sum of two values of at most float32's
    # precision, correctly rounded, is the float64 sum correctly rounded. Rounded by numpy,
    # independently of the reference (whose reduce_precision once flushed float16's subnormal
    # sums to zero; among a million sums a few land there).
    np.testing.assert_array_equal(as_f64(h), (as_f64(x) + as_f64(r)).astype(h_dtype).astype(np.float64))
    # Every check below is the plain norm's, of h (exact in h's dtype), with the applied scale.
    applied = (jnp.asarray(offset + as_f64(params[0])),) + params[1:]
    mags = term_magnitudes(op, h, applied, ct_y, y_ref, memory_efficient=memory_efficient)
    width = cols
    assert_close(y, y_ref, tol=result_tolerance(op, "y", dtype, dtype, width), mag=mags["y"], what="y")
    # dx = dr = the norm's gradient in h plus h's own cotangent, rounded once to each dtype.
    dh_mag = mags["x"] + (0.0 if ct_h is None else np.abs(as_f64(ct_h)))
    for name, inp, g, g_ref, mag in (
        ("x", x, grads[0], grads_ref[0], dh_mag), ("residual", r, grads[1], grads_ref[1], dh_mag),
        *((p, inp, g, e, mags[p]) for p, inp, g, e in zip(op.params, params, grads[2:], grads_ref[2:])),
    ):
        assert g.dtype == inp.dtype and g.shape == inp.shape, (name, g.dtype, inp.dtype)
        tol = result_tolerance(op, "x" if name == "residual" else name, g.dtype, dtype, width, memory_efficient)
        assert_close(g, g_ref, tol=tol, mag=mag, what=f"{op} d{name}")
    return (y, h), grads


# ---------------------------------------------------------------------------------------------
# Values and gradients


@op_params(NORMS)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("use_h", [True, False], ids=["h_used", "h_discarded"])
@pytest.mark.parametrize("shape", [(6, 256), (3, 37), (2, 3, 130)], ids=str)
def test_matches_reference(op, dtype, use_h, shape, rng):
    check_add_norm(op, rng, shape, DTYPES[dtype], use_h=use_h)


@op_params(NORMS)
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("shape", [(2100, 1024), (1030, 2048), (520, 4096), (700, 776)], ids=str)
def test_many_rows(op, dtype, shape, rng):
    """Rows of 520-4096 16-bit columns, more of them than the backward has workers, so each
    worker sums the scale/bias gradients over several rows: with h's cotangent RMSNorm's CUDA
    backward takes one pack a thread there (tile_choice.h, one_pack_rows), LayerNorm's two."""
    check_add_norm(op, rng, shape, DTYPES[dtype], use_h=True)


# Launches of at least 16 rows an SM (2112 on 132 SMs, 2368 on 148) of 2049-16384 16-bit columns,
# x, r and h of one dtype, take one CTA of 8 packs a thread holding h as stored (tile_choice.h,
# kAddNormHeldForwardBudget): 64 threads at 3000 and 4096, 128 at 6000, 256 at 9000 (its last
# warp's packs partly past the row) and 16384.
@op_params(NORMS)
@pytest.mark.parametrize("shape,dtype", [((2400, 3000), "float16"), ((2400, 4096), "bfloat16"),
                                         ((2400, 6000), "bfloat16"), ((2400, 9000), "float16"),
                                         ((2400, 16384), "bfloat16")], ids=str)
@pytest.mark.wide
def test_many_rows_held_tiles(op, shape, dtype, rng):
    check_add_norm(op, rng, shape, DTYPES[dtype], use_h=True)


@op_params(NORMS)
@pytest.mark.parametrize("shape", [(2100, 1024), (520, 4096)], ids=str)
def test_many_rows_h_discarded(op, shape, rng):
    """As above without h's cotangent: both norms' CUDA backward takes two packs a thread,
    LayerNorm's with the default mode's flags as constants (norm_ops.cuh, NormBwdOp::kFixable)."""
    check_add_norm(op, rng, shape, BF16, use_h=False)


@op_params(NORMS)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("use_h", [True, False], ids=["h_used", "h_discarded"])
def test_memory_efficient(op, dtype, use_h, rng):
    check_add_norm(op, rng, (5, 1024), DTYPES[dtype], use_h=use_h, memory_efficient=True)


@op_params(NORMS)
@pytest.mark.parametrize("r_dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("memory_efficient", [False, True], ids=["default", "memory_efficient"])
def test_float32_residual_stream(op, r_dtype, memory_efficient, rng):
    """bfloat16 x with h in float32: the residual may be either; dx comes back in bfloat16, dr in
    the residual's dtype."""
    check_add_norm(op, rng, (4, 520), BF16, r_dtype=DTYPES[r_dtype], residual_dtype=jnp.float32,
                   memory_efficient=memory_efficient)


@op_params(NORMS)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("residual", [False, True], ids=["plain", "residual"])
def test_scale_offset(op, dtype, residual, rng):
    dtype = DTYPES[dtype]
    if residual:
        check_add_norm(op, rng, (5, 300), dtype, offset=1.0, memory_efficient=dtype == F32)
        return
    x = make_x(op, rng, (5, 300), dtype)
    params = _params(op, rng, 300, dtype, offset=1.0)
    ct = make_cotangent(rng, x)
    y, pull = jax.vjp(lambda x, *p: op.fn(x, *p, scale_offset=1.0), x, *params)
    y_ref, pull_ref = jax.vjp(lambda x, *p: op.ref(x, *p, scale_offset=1.0), to64(x), *map(to64, params))
    applied = (jnp.asarray(1.0 + as_f64(params[0])),) + params[1:]
    mags = term_magnitudes(op, x, applied, ct, y_ref)
    assert_close(y, y_ref, tol=result_tolerance(op, "y", dtype, dtype, 300), mag=mags["y"], what="y")
    for name, g, g_ref in zip(("x", *op.params), pull(ct), pull_ref(to64(ct))):
        assert_close(g, g_ref, tol=result_tolerance(op, name, g.dtype, dtype, 300), mag=mags[name], what=name)


@op_params(NORMS)
def test_scale_offset_keeps_bfloat16_scale_precision(op, rng):
    """float32 x, bfloat16 scale near zero: 1 + scale rounded to bfloat16 would move y by up to
    2^-9 relative, far beyond float32's tolerance."""
    x = make_x(op, rng, (4, 512), F32)
    scale = jnp.asarray(rng.uniform(-0.02, 0.02, size=512), BF16)
    y = op.fn(x, scale, scale_offset=1.0)
    y_ref = op.ref(to64(x), to64(scale), scale_offset=1.0)
    rounded = op.ref(to64(x), to64((1.0 + scale.astype(F32)).astype(BF16)))
    tol = result_tolerance(op, "y", F32, F32, 512)
    mag = term_magnitudes(op, x, (jnp.asarray(1.0 + as_f64(scale)),), x, y_ref)["y"]
    assert_close(y, y_ref, tol=tol, mag=mag, what="y")
    assert np.abs(as_f64(rounded) - as_f64(y_ref)).max() > 100 * np.abs(as_f64(y) - as_f64(y_ref)).max()


@op_params(NORMS)
def test_scale_gradient_does_not_see_the_offset(op, rng):
    x = make_x(op, rng, (6, 64), F32)
    params = _params(op, rng, 64, F32, offset=1.0)
    loss = lambda s, off: jnp.sum(jnp.sin(op.fn(x, s, *params[1:], scale_offset=off)))
    # d/ds f(x_hat * (1 + s)) = d/dt f(x_hat * t) at t = 1 + s.
    np.testing.assert_allclose(jax.grad(loss)(params[0], 1.0), jax.grad(loss)(params[0] + 1.0, 0.0), rtol=1e-6)


@op_params(NORMS)
def test_equals_unfused_pair(op, rng):
    """(y, h) is exactly `h = x + r; y = norm(h)`: the same rounding of h, the same kernels' y.
    2000 rows: on a GPU a norm forward of few rows is spread to one pack a thread
    (spread_small_launch), which the residual-add forward is not, so the row's statistics would be
    summed in another order (8 rows: y one bfloat16 unit apart in 1 of 3072 elements, once)."""
    x, r = (make_x(op, rng, (2000, 384), BF16) for _ in range(2))
    params = _params(op, rng, 384, F32)
    y, h = op.fn(x, *params, residual=r)
    np.testing.assert_array_equal(as_f64(h), as_f64(x + r))
    np.testing.assert_array_equal(as_f64(y), as_f64(op.fn(x + r, *params)))


# ---------------------------------------------------------------------------------------------
# One pass each way, symbolic zeros


@op_params(NORMS)
@pytest.mark.parametrize("use", ["both", "y", "h"])
def test_backward_reads_h_cotangent_only_when_used(op, use, rng):
    x, r = (make_x(op, rng, (4, 64), F32) for _ in range(2))
    params = _params(op, rng, 64, F32)

    def loss(x, r):
        y, h = op.fn(x, *params, residual=r)
        return {"both": jnp.sum(y * y) + jnp.sum(jnp.sin(h)), "y": jnp.sum(y * y), "h": jnp.sum(jnp.sin(h))}[use]

    eqns = [e for e in jax.make_jaxpr(jax.grad(loss, (0, 1)))(x, r).jaxpr.eqns if e.primitive.name.startswith("jaxnorm")]
    names = [e.primitive.name for e in eqns]
    assert names.count("jaxnorm_add_norm_fwd") == 1 and "jaxnorm_norm_fwd" not in names, names
    bwd = [e for e in eqns if e.primitive.name == "jaxnorm_add_norm_bwd"]
    if use == "h":  # y discarded: the gradient is h's cotangent, no backward kernel
        assert not bwd, names
    else:
        (b,) = bwd
        assert b.params["has_dh"] == (use == "both")
        assert (b.invars[2].aval.shape == (0,)) == (use == "y")


@op_params(NORMS)
def test_lowered_is_one_custom_call_each_way(op, rng):
    """The forward and backward are one custom call each, with no (rows, cols) add around them:
    neither x + r nor dx + dh is left to XLA."""
    x, r = (make_x(op, rng, (8, 96), BF16) for _ in range(2))
    params = _params(op, rng, 96, F32)

    def loss(x, r, *p):
        y, h = op.fn(x, *p, residual=r, scale_offset=1.0)
        return jnp.sum(y.astype(F32) ** 2) + jnp.sum(jnp.sin(h.astype(F32)))

    text = jax.jit(jax.grad(loss, (0, 1))).lower(x, r, *params).as_text()
    assert text.count("custom_call_target = \"jaxnorm_add_norm_fwd\"") + text.count("@jaxnorm_add_norm_fwd") >= 1
    assert "jaxnorm_add_norm_bwd" in text and "jaxnorm_norm_fwd" not in text and "jaxnorm_norm_bwd" not in text
    big_adds = [line for line in text.splitlines() if "stablehlo.add" in line and "tensor<8x96x" in line]
    assert not big_adds, big_adds


# ---------------------------------------------------------------------------------------------
# Forward mode and transforms


@op_params(NORMS)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_jvp_matches_reference(op, dtype, rng):
    dtype = DTYPES[dtype]
    shape = (5, 200)
    x, r = make_x(op, rng, shape, dtype), jnp.asarray(rng.normal(size=shape), dtype)
    params = _params(op, rng, 200, dtype, offset=1.0)
    tangents = (make_cotangent(rng, x), make_cotangent(rng, r), *(make_cotangent(rng, p) for p in params))
    f = lambda fn, dt: lambda x, r, *p: fn(x, *p, residual=r, residual_dtype=dt, scale_offset=1.0)
    (y, h), (ty, th) = jax.jvp(f(op.fn, None), (x, r, *params), tangents)
    _, (ty_ref, th_ref) = jax.jvp(f(op.ref, dtype), tuple(map(to64, (x, r, *params))), tuple(map(to64, tangents)))
    # Linear in the tangents: the x-gradient's terms bound the error, for every input's share.
    tol = result_tolerance(op, "x", dtype, dtype, 200)
    applied = (jnp.asarray(1.0 + as_f64(params[0])),) + params[1:]
    mags = term_magnitudes(op, h, applied, th_ref, ty_ref)
    scale_mag = np.abs(as_f64(tangents[2])) * 4 + (np.abs(as_f64(tangents[3])) if len(params) > 1 else 0)
    assert_close(ty, ty_ref, tol=tol, mag=mags["x"] * np.abs(as_f64(applied[0])) + scale_mag, what="dy")
    assert_close(th, th_ref, tol=tol, mag=np.abs(as_f64(tangents[0])) + np.abs(as_f64(tangents[1])), what="dh")


@op_params(NORMS)
def test_hessian_vector_product(op, rng):
    """Second order: the backward's own derivative, as for the plain norms."""
    x, r = make_x(op, rng, (3, 24), F32), jnp.asarray(rng.normal(size=(3, 24)), F32)
    params = _params(op, rng, 24, F32)
    v = make_cotangent(rng, x)

    def hvp(fn):
        def loss(x):
            y, h = fn(x, *params, residual=r)
            return jnp.sum(jnp.sin(y)) + jnp.sum(h**3) / 3
        return jax.jvp(jax.grad(loss), (x,), (v,))[1]

    got, want = hvp(op.fn), hvp(lambda x, *p, residual: op.ref(to64(x), *map(to64, p), residual=to64(residual)))
    np.testing.assert_allclose(as_f64(got), as_f64(want), rtol=2e-4, atol=2e-4 * np.abs(as_f64(want)).max())


@op_params(NORMS)
def test_vmap(op, rng):
    """A batch axis folds into the rows: the same values as the call on all rows, and per-example
    scale gradients from the same launch."""
    x, r = make_x(op, rng, (3, 4, 40), F32), jnp.asarray(rng.normal(size=(3, 4, 40)), F32)
    params = _params(op, rng, 40, F32)
    y, h = jax.vmap(lambda x, r: op.fn(x, *params, residual=r))(x, r)
    y_all, h_all = op.fn(x, *params, residual=r)
    np.testing.assert_array_equal(y, y_all)
    np.testing.assert_array_equal(h, h_all)

    def loss(s, x, r):
        y, h = op.fn(x, s, *params[1:], residual=r)
        return jnp.sum(jnp.sin(y)) + jnp.sum(h * y)

    per_example = jax.vmap(jax.grad(loss), (None, 0, 0))(params[0], x, r)
    looped = np.stack([jax.grad(loss)(params[0], x[i], r[i]) for i in range(3)])
    np.testing.assert_allclose(per_example, looped, rtol=1e-6, atol=1e-6)
    # Unbatched residual with a batched x: broadcast into the rows.
    y1, _ = jax.vmap(lambda x: op.fn(x, *params, residual=r[0]))(x)
    np.testing.assert_array_equal(y1, op.fn(x, *params, residual=jnp.broadcast_to(r[0], x.shape))[0])


@op_params(NORMS)
def test_empty_rows(op, rng):
    x = jnp.zeros((0, 16), BF16)
    y, h = op.fn(x, residual=x, residual_dtype=jnp.float32)
    assert y.shape == h.shape == (0, 16) and y.dtype == BF16 and h.dtype == F32


@op_params(NORMS)
@pytest.mark.parametrize("shape", [(300, 384), (2100, 1024)], ids=str)
def test_bitwise_reproducible(op, shape, rng):
    """Every gradient, with h's cotangent, the same bits run to run."""
    x, r = make_x(op, rng, shape, BF16), jnp.asarray(rng.normal(size=shape), BF16)
    params = _params(op, rng, shape[-1], F32)

    def loss(x, r, *params):
        y, h = op.fn(x, *params, residual=r)
        return jnp.sum(jnp.sin(y.astype(F32))) + jnp.sum(jnp.cos(h.astype(F32)))

    g = jax.jit(jax.grad(loss, tuple(range(2 + len(params)))))
    first, second = g(x, r, *params), g(x, r, *params)
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a, b)


# ---------------------------------------------------------------------------------------------
# Argument checks


@pytest.mark.parametrize(
    "kwargs,error,match",
    [
        (dict(residual=np.zeros((4, 7), np.float32)), ValueError, r"`residual` must have x's shape \(4, 8\), got \(4, 7\)"),
        (dict(residual=np.zeros((4, 8), np.float16)), TypeError, r"`residual` must have x's dtype \(bfloat16\)"),
        (dict(residual=np.zeros((4, 8), np.int32)), TypeError, r"`residual` must be float32, bfloat16 or float16"),
        (dict(residual=np.zeros((4, 8), jnp.bfloat16), residual_dtype=np.float16), TypeError,
         r"`residual_dtype` must be x's dtype \(bfloat16\) or float32, got float16"),
        (dict(residual=np.zeros((4, 8), jnp.bfloat16), residual_dtype="not a dtype"), TypeError,
         r"`residual_dtype` must be a dtype"),
        (dict(residual_dtype=np.float32), ValueError, r"`residual_dtype` .* without a `residual`"),
        (dict(scale_offset=1.0, no_scale=True), ValueError, r"`scale_offset` \(1.0\) needs a `scale`"),
        (dict(scale_offset=float("nan")), ValueError, r"`scale_offset` must be finite"),
        (dict(scale_offset=jnp.ones(())), None, None),  # a concrete array is fine outside jit
    ],
)
@op_params(NORMS)
def test_bad_arguments(op, kwargs, error, match):
    x = jnp.zeros((4, 8), BF16)
    kwargs = dict(kwargs)
    params = () if kwargs.pop("no_scale", False) else (jnp.ones((8,), F32),)
    if error is None:
        op.fn(x, *params, **kwargs)
        return
    with pytest.raises(error, match=f"{op.name}: {match}"):
        op.fn(x, *params, **kwargs)


@op_params(NORMS)
def test_traced_scale_offset_is_refused(op):
    with pytest.raises(TypeError, match="`scale_offset` must be a Python float"):
        jax.jit(lambda x, o: op.fn(x, jnp.ones((8,), F32), scale_offset=o))(jnp.zeros((2, 8), F32), 1.0)

