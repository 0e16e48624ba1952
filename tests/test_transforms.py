"""jit, vmap and grad on every op: batching rules, the lowering, and reproducibility."""

import numpy as np
import pytest

import jax
import jax.numpy as jnp

from cases import (
    DTYPES, F32, NORMS, as_f64, assert_close, make_cotangent, make_params, make_x, op_params,
    result_tolerance, term_magnitudes, to64, tolerance,
)

WIDTH = 40
BATCH = 3


def per_example(op, x, params, ct):
    """Output and vjp (in x and every parameter) of one call."""
    y, pullback = jax.vjp(lambda x, *ps: op.fn(x, *ps), x, *params)
    return y, pullback(ct)


def _stack(results):
    return jax.tree.map(lambda *a: jnp.stack(a), *results)


def assert_trees_close(actual, expected, dtype, width=WIDTH):
    """Two jaxnorm computations of the same values, differing only in batching: they may
    differ by reduction order, so by float32 arithmetic, and by one rounding of the dtype."""
    la, le = jax.tree.leaves(actual), jax.tree.leaves(expected)
    assert len(la) == len(le)
    for a, e in zip(la, le):
        assert a.dtype == e.dtype and a.shape == e.shape, (a.dtype, a.shape, e.dtype, e.shape)
        mag = float(np.abs(as_f64(e)).max())
        assert_close(a, e, tol=tolerance(e.dtype, width), mag=mag)


@op_params()
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_vmap_matches_loop(op, dtype, rng):
    dtype = DTYPES[dtype]
    xs = make_x(op, rng, (BATCH, 5, WIDTH), dtype)
    cts = make_cotangent(rng, xs)
    params = make_params(op, rng, (WIDTH,), dtype)
    f = lambda x, ct: per_example(op, x, params, ct)  # noqa: E731
    batched = jax.jit(jax.vmap(f))(xs, cts)
    looped = _stack([f(xs[i], cts[i]) for i in range(BATCH)])
    # Per-example parameter gradients come out of the batching rule, not a sum over the batch.
    for g in batched[1][1:]:
        assert g.shape == (BATCH, WIDTH)
    assert_trees_close(batched, looped, dtype)


@op_params()
def test_vmap_matches_loop_many_row_chunks(op, rng):
    """Per-example gradients when each example's rows span several CPU work chunks (the norms'
    scale/bias sums are added chunk by chunk within each vmapped group)."""
    xs = make_x(op, rng, (BATCH, 1100, 129), F32)
    cts = make_cotangent(rng, xs)
    params = make_params(op, rng, (129,), F32)
    f = lambda x, ct: per_example(op, x, params, ct)  # noqa: E731
    batched = jax.jit(jax.vmap(f))(xs, cts)
    looped = _stack([jax.jit(f)(xs[i], cts[i]) for i in range(BATCH)])
    assert_trees_close(batched, looped, F32, width=1100 * 129)


# vmapped groups of the norm backward's rows, each group its own scale/bias gradient:
# - the held-scale cluster tiles (row_tiles.cuh, held_scale_bwd), where the scale held in shared
#   memory (and RMSNorm's staged copies) are indexed by group as well as by worker: 40 rows a
#   group of 65536 bf16 columns give a worker several rows (clusters of 4 an H100 or H200 holds
#   ~33 of at once);
# - RMSNorm's warp rows (tile_choice.h, warp_rows: 520-896 16-bit columns in launches of at least
#   64 rows an SM): four groups of 4000 rows take them in one launch (16000 rows), while a looped
#   call's 4000 rows take 64-thread rows (fewer than 8448 on 132 SMs), so the two tiles meet.
@op_params(NORMS)
@pytest.mark.parametrize("groups,rows,width", [(2, 40, 65536), (4, 4000, 648)], ids=str)
@pytest.mark.wide
def test_vmap_grouped_backward(op, groups, rows, width, rng):
    xs = make_x(op, rng, (groups, rows, width), DTYPES["bfloat16"])
    cts = make_cotangent(rng, xs)
    params = make_params(op, rng, (width,), DTYPES["bfloat16"])
    f = lambda x, ct: per_example(op, x, params, ct)  # noqa: E731
    batched = jax.jit(jax.vmap(f))(xs, cts)
    looped = _stack([jax.jit(f)(xs[i], cts[i]) for i in range(groups)])
    assert_trees_close(batched, looped, DTYPES["bfloat16"], width=width)


@op_params(NORMS)
def test_vmap_batched_params(op, rng):
    """Per-example scale and bias cannot share one kernel launch; the batching rule maps them."""
    xs = make_x(op, rng, (BATCH, 5, WIDTH), F32)
    cts = make_cotangent(rng, xs)
    params = make_params(op, rng, (BATCH, WIDTH), F32)
    f = lambda x, ct, *ps: per_example(op, x, ps, ct)  # noqa: E731
    batched = jax.jit(jax.vmap(f))(xs, cts, *params)
    looped = _stack([f(xs[i], cts[i], *(p[i] for p in params)) for i in range(BATCH)])
    assert_trees_close(batched, looped, F32)


@op_params()
def test_vmap_non_leading_axis(op, rng):
    xs = make_x(op, rng, (5, BATCH, WIDTH), F32)
    cts = make_cotangent(rng, xs)
    params = make_params(op, rng, (WIDTH,), F32)
    f = lambda x, ct: per_example(op, x, params, ct)  # noqa: E731
    batched = jax.jit(jax.vmap(f, in_axes=1))(xs, cts)
    looped = _stack([f(xs[:, i], cts[:, i]) for i in range(BATCH)])
    assert_trees_close(batched, looped, F32)


@op_params()
def test_nested_vmap(op, rng):
    xs = make_x(op, rng, (2, BATCH, 4, WIDTH), F32)
    cts = make_cotangent(rng, xs)
    params = make_params(op, rng, (WIDTH,), F32)
    f = lambda x, ct: per_example(op, x, params, ct)  # noqa: E731
    batched = jax.jit(jax.vmap(jax.vmap(f)))(xs, cts)
    looped = _stack([_stack([f(xs[i, j], cts[i, j]) for j in range(BATCH)]) for i in range(2)])
    assert_trees_close(batched, looped, F32)


def _loss(fn, weights):
    return lambda x, *ps: jnp.sum(fn(x, *ps) * weights)


def _check_loss_grads(op, grads, grads_ref, x, params, weights, axis=-1):
    """Gradients of sum(f(x) * weights), which are f's vjp with cotangent `weights`. Batched
    parameter gradients are judged per example against the whole batch's term magnitudes (an
    upper bound of each example's), so examples mixed up with one another cannot cancel."""
    width = x.shape[-1] if axis == -1 else int(np.prod([x.shape[a] for a in axis]))
    ct = jnp.broadcast_to(weights, x.shape)
    y_ref = op.ref(to64(x), *(to64(p) for p in params), axis=axis)
    mags = term_magnitudes(op, x, params, ct, y_ref, axis=axis)
    for name, g, g_ref in zip(("x", *op.params), grads, grads_ref):
        tol = result_tolerance(op, name, g.dtype, x.dtype, width)
        assert_close(g, g_ref, tol=tol, mag=mags[name], what=f"{op} d{name}")


@op_params()
def test_jit_vmap_grad(op, rng):
    xs = make_x(op, rng, (BATCH, 4, WIDTH), F32)
    params = make_params(op, rng, (WIDTH,), F32)
    weights = jnp.asarray(rng.normal(size=(4, WIDTH)), F32)
    argnums = tuple(range(1 + len(params)))

    def per_example_grads(fn, xs, params):
        in_axes = (0,) + (None,) * len(params)
        return jax.jit(jax.vmap(jax.grad(_loss(fn, weights), argnums), in_axes))(xs, *params)

    grads = per_example_grads(op.fn, xs, params)
    grads_ref = per_example_grads(op.ref, to64(xs), tuple(to64(p) for p in params))
    for g in grads[1:]:
        assert g.shape == (BATCH, WIDTH)
    _check_loss_grads(op, grads, grads_ref, xs, params, weights)


@op_params()
def test_grad_of_vmap(op, rng):
    xs = make_x(op, rng, (BATCH, 4, WIDTH), F32)
    params = make_params(op, rng, (WIDTH,), F32)
    weights = jnp.asarray(rng.normal(size=(BATCH, 4, WIDTH)), F32)
    argnums = tuple(range(1 + len(params)))

    def grads_of(fn, xs, params):
        vf = jax.vmap(fn, (0,) + (None,) * len(params))
        return jax.jit(jax.grad(_loss(vf, weights), argnums))(xs, *params)

    grads = grads_of(op.fn, xs, params)
    grads_ref = grads_of(op.ref, to64(xs), tuple(to64(p) for p in params))
    _check_loss_grads(op, grads, grads_ref, xs, params, weights)


@op_params()
def test_lowers_to_custom_calls(op, rng):
    x = make_x(op, rng, (4, WIDTH), F32)
    params = make_params(op, rng, (WIDTH,), F32)
    kind = "norm" if op.is_norm else "softmax"
    fwd_hlo = jax.jit(lambda x, *ps: op.fn(x, *ps)).lower(x, *params).as_text()
    assert f"custom_call @jaxnorm_{kind}_fwd" in fwd_hlo
    assert f"jaxnorm_{kind}_bwd" not in fwd_hlo
    loss = lambda x, *ps: jnp.sum(op.fn(x, *ps) * x)  # noqa: E731
    grad_hlo = jax.jit(jax.grad(loss, tuple(range(1 + len(params))))).lower(x, *params).as_text()
    assert f"custom_call @jaxnorm_{kind}_fwd" in grad_hlo
    assert f"custom_call @jaxnorm_{kind}_bwd" in grad_hlo


def _bits(a):
    a = np.asarray(a)
    return a.view(np.dtype(f"u{a.dtype.itemsize}"))


@op_params()
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_deterministic(op, dtype, rng):
    """The same jitted vjp twice gives identical bits, parameter gradients included (many rows,
    so GPU kernels split the column sums across workers)."""
    dtype = DTYPES[dtype]
    x = make_x(op, rng, (2048, 384), dtype)
    ct = make_cotangent(rng, x)
    params = make_params(op, rng, (384,), dtype)
    run = jax.jit(lambda x, ct, *ps: per_example(op, x, ps, ct))
    first, second = run(x, ct, *params), run(x, ct, *params)
    # vmapped: per-example parameter gradients reduce per group.
    run_v = jax.jit(jax.vmap(lambda x, ct: per_example(op, x, params, ct)))
    xv, ctv = x.reshape(4, 512, 384), ct.reshape(4, 512, 384)
    first_v, second_v = run_v(xv, ctv), run_v(xv, ctv)
    for a, b in zip(jax.tree.leaves((first, first_v)), jax.tree.leaves((second, second_v))):
        np.testing.assert_array_equal(_bits(a), _bits(b))


@op_params(NORMS)
@pytest.mark.parametrize("shape", [(200, 32768), (40, 131072)], ids=str)
def test_deterministic_wide_rows(op, shape, rng):
    """The same bits twice where the GPU's wide norm backward holds the scale and stages each
    worker's next row by bulk copies on mbarriers (cluster tiles, more rows than workers): a copy
    read before it landed, or overwritten while read, would show as changed bits."""
    x = make_x(op, rng, shape, DTYPES["bfloat16"])
    ct = make_cotangent(rng, x)
    params = make_params(op, rng, shape[-1:], DTYPES["bfloat16"])
    run = jax.jit(lambda x, ct, *ps: per_example(op, x, ps, ct))
    first = run(x, ct, *params)
    for _ in range(2):
        for a, b in zip(jax.tree.leaves(first), jax.tree.leaves(run(x, ct, *params))):
            np.testing.assert_array_equal(_bits(a), _bits(b))


@pytest.mark.parametrize("axis", [-1, (-2, -1)], ids=str)
@op_params(NORMS)
def test_jit_grad_vmap_compose_over_trailing_axes(op, axis, rng):
    """vmap(jit(grad(...))) with normalization over one or two trailing axes."""
    shape = (BATCH, 3, 6, 7)
    norm_shape = shape[-1:] if axis == -1 else shape[-2:]
    x = make_x(op, rng, shape, F32)
    params = make_params(op, rng, norm_shape, F32)
    weights = jnp.asarray(rng.normal(size=shape[1:]), F32)
    argnums = tuple(range(1 + len(params)))

    def grads_of(fn, x, params):
        loss = _loss(lambda x, *ps: fn(x, *ps, axis=axis), weights)
        in_axes = (0,) + (None,) * len(params)
        return jax.vmap(jax.jit(jax.grad(loss, argnums)), in_axes)(x, *params)

    grads = grads_of(op.fn, x, params)
    grads_ref = grads_of(op.ref, to64(x), tuple(to64(p) for p in params))
    _check_loss_grads(op, grads, grads_ref, x, params, weights, axis=axis)
