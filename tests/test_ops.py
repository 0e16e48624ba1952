"""Every op, forward and vjp in all differentiable arguments, against the float64 reference."""

import numpy as np
import pytest

import jax
import jax.numpy as jnp

from cases import (
    BF16, DTYPES, F16, F32, LAYER_NORM, NORMS, SOFTMAX, as_f64, check_op, make_params, make_x,
    op_and_param_subsets, op_params,
)

# Powers of two and their neighbours probe vectorization tails; 1000, 8193 odd sizes; 65536 the
# widest row the GPU kernels keep in one block.
WIDTHS = (1, 2, 3, 31, 32, 33, 127, 128, 1000, 1024, 1025, 4096, 8193, 65536)
SMALL_WIDTHS = (1, 33, 1024, 4096, 8193)
LEADING = ((), (7,), (2, 3, 5))
FEW_LEADING = ((), (2, 3, 5))


def _leading_id(lead):
    return "x".join(map(str, lead)) or "1row"


leading_params = pytest.mark.parametrize("leading", LEADING, ids=_leading_id)
few_leading_params = pytest.mark.parametrize("leading", FEW_LEADING, ids=_leading_id)


@op_params()
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@leading_params
@pytest.mark.parametrize("width", WIDTHS)
def test_matches_reference(op, dtype, leading, width, rng):
    check_op(op, rng, (*leading, width), DTYPES[dtype])


@op_params()
@few_leading_params
@pytest.mark.parametrize("width", SMALL_WIDTHS)
def test_float16(op, leading, width, rng):
    check_op(op, rng, (*leading, width), F16)


# float32 parameters with low-precision activations: the usual mixed-precision training setup.
MIXED = [
    pytest.param(BF16, ("scale", "bias"), id="bf16-x-f32-scale-bias"),
    pytest.param(F16, ("scale",), id="f16-x-f32-scale"),
]


@op_params(NORMS)
@pytest.mark.parametrize("x_dtype,names", MIXED)
@few_leading_params
@pytest.mark.parametrize("width", SMALL_WIDTHS)
def test_mixed_param_dtype(op, x_dtype, names, leading, width, rng):
    check_op(op, rng, (*leading, width), x_dtype, param_dtype=F32, names=names)


@op_and_param_subsets()
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_optional_params(op, names, dtype, rng):
    check_op(op, rng, (4, 1025), DTYPES[dtype], names=names)


# Every dispatch boundary of the row kernels: 2^k - 1, 2^k, 2^k + 1 and 2^k + 8 (one vector of
# bf16 past the boundary), up to 2^18; widths the grid above already runs are left out.
SWEEP = sorted({w for k in range(19) for w in (2**k - 1, 2**k, 2**k + 1, 2**k + 8) if w >= 1} - set(WIDTHS))


def _sweep_param(w):
    if w <= 65536:
        return w
    # One wide width also runs off-GPU: it costs about 2 s there in all.
    return pytest.param(w, marks=pytest.mark.wide(cpu=w == 2**18))


@op_params((LAYER_NORM, SOFTMAX))
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("width", [_sweep_param(w) for w in SWEEP])
def test_width_sweep(op, dtype, width, rng):
    check_op(op, rng, (3, width), DTYPES[dtype])


# Cluster tiles (rows split over 2-16 CTAs) are persistent: each cluster takes several rows in
# turn, reusing its statistics scratch and barriers every other row, and the norm backward sums
# its scale/bias partials over them. Enough rows that every cluster of the GPU runs at least
# three (bf16 32768: clusters of 2 forward, 2-4 backward; float32 131072: clusters of 16; bf16
# 262144: the widest tiles, with the backward's partials in shared memory; bf16 65544: a row one
# pack past a cluster's, so the last CTA's part of it is short, in every stage the forward's
# bulk copies refill; float32 262144: the 512-thread clusters of 16, softmax's one-shot at two
# CTAs an SM, the norms' staged).
@op_params()
@pytest.mark.parametrize("shape,dtype", [((400, 32768), "bfloat16"), ((64, 131072), "float32"),
                                         ((48, 262144), "bfloat16"), ((300, 65544), "bfloat16"),
                                         ((48, 262144), "float32")],
                         ids=["400x32768-bfloat16", "64x131072-float32", "48x262144-bfloat16",
                              "300x65544-bfloat16", "48x262144-float32"])
@pytest.mark.wide
def test_cluster_workers_take_many_rows(op, shape, dtype, rng):
    check_op(op, rng, shape, DTYPES[dtype])


@op_params()
def test_vmap_over_an_empty_axis(op, rng):
    # No launch at all: the batching rule returns empty results of the per-example shapes, and
    # so does the gradient's.
    x = jnp.zeros((0, 3, 16), BF16)
    params = make_params(op, rng, (16,), BF16)
    y = jax.vmap(lambda x: op.fn(x, *params))(x)
    assert (y.shape, y.dtype) == (x.shape, x.dtype)
    g = jax.vmap(jax.grad(lambda x: jnp.sum(op.fn(x, *params).astype(jnp.float32))))(x)
    assert (g.shape, g.dtype) == (x.shape, x.dtype)


@op_params()
@pytest.mark.parametrize("shape", [(0, 16), (2, 0, 16)], ids=str)
def test_empty_leading_shape(op, shape, rng):
    dtype = BF16  # the dtype must survive the early return too
    x = jnp.zeros(shape, dtype)  # no values to be zero: the array is empty
    params = make_params(op, rng, shape[-1:], dtype)

    def f(x, *ps):
        return op.fn(x, *ps)

    y, pullback = jax.vjp(f, x, *params)
    assert (y.shape, y.dtype) == (shape, dtype)
    grads = pullback(jnp.zeros(shape, dtype))
    for g, inp in zip(grads, (x, *params)):
        assert (g.shape, g.dtype) == (inp.shape, inp.dtype)
    # Nothing flows from an empty batch into the parameters.
    for g in grads[1:]:
        np.testing.assert_array_equal(as_f64(g), 0.0)


@op_params()
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("width", [37, 1024])  # the loop kernel; a tile of 16-byte packs
def test_nonfinite_rows(op, dtype, width, rng):
    """Rows holding NaN, +inf or -inf give what the reference gives, row by row."""
    dtype = DTYPES[dtype]
    x = np.asarray(make_x(op, rng, (8, width), dtype)).astype(np.float32)
    x[0, 5] = np.nan
    x[1, 0] = np.inf
    x[2, 36] = -np.inf
    x[3, 7:9] = [np.inf, -np.inf]
    x[4, 3] = np.nan
    x[4, 4] = np.inf
    # A NaN among only -inf (every other element, or all but one far away): a softmax thread
    # whose elements are all -inf or NaN has no finite maximum of its own.
    x[6] = -np.inf
    x[6, 17] = np.nan
    x[7, : width // 2] = -np.inf
    x[7, 1] = np.nan
    x = jnp.asarray(x, dtype)
    params = make_params(op, rng, (width,), dtype)
    actual = np.asarray(op.fn(x, *params)).astype(np.float32)
    # The reference on the same values in float32: non-finite semantics are those of jnp in the
    # precision the kernels compute in.
    expected = op.ref(x.astype(F32), *(p.astype(F32) for p in params)).astype(dtype)
    expected = np.asarray(expected).astype(np.float32)
    np.testing.assert_array_equal(np.isnan(actual), np.isnan(expected))
    np.testing.assert_array_equal(np.isposinf(actual), np.isposinf(expected))
    np.testing.assert_array_equal(np.isneginf(actual), np.isneginf(expected))
    finite = np.isfinite(expected)
    assert finite[5].all()  # the clean row stays clean
    # Finite entries: two float32 computations rounded to the dtype, a few ulp apart at most.
    tol = 4 * float(jnp.finfo(dtype).eps) + 64 * 2.0**-24
    a, e = actual[finite], expected[finite]
    np.testing.assert_allclose(a, e, rtol=tol, atol=tol * np.abs(e).max())


# Rows enough for several work chunks (the CPU handlers split rows into ~64K-element chunks on
# the thread pool and add the norms' gradient sums chunk by chunk; the GPU runs its usual tiles).
@op_params()
@pytest.mark.parametrize("shape", [(4096, 33), (3, 700, 129)], ids=["4096x33", "3x700x129"])
def test_many_row_chunks(op, shape, rng):
    check_op(op, rng, shape, F32)


# ---------------------------------------------------------------------------------------------
# Launch sizes: on the GPU a norm or softmax forward of few rows of at most 128 threads' packs is
# spread to one pack a thread (tile_choice.h, spread_small_launch); more rows keep several packs a
# thread. Both
# forms of each width: row counts on either side of an H100's threshold (132 SMs x 128 threads
# over the threads a row), and widths past the spread's. Wider rows of few rows are replicated
# (4 CTAs a row up to 33 rows, 2 up to 66) or split over clusters of 16 (16K-32K 16-bit columns,
# 8K-16K float32, up to 8 rows): row counts on both sides of those bounds, widths that leave
# some of a replica's packs past the row's end.


@op_params()
@pytest.mark.parametrize("shape,dtype", [((8, 768), "bfloat16"), ((300, 768), "bfloat16"),
                                         ((64, 512), "bfloat16"), ((8, 4096), "bfloat16"), ((200, 4096), "bfloat16"),
                                         ((8, 2048), "float32"), ((200, 2048), "float32"),
                                         ((8, 1024), "float32"), ((8, 256), "float32"), ((500, 256), "float32"),
                                         ((8, 128), "float16"), ((2000, 128), "float16"),
                                         ((1, 2048), "bfloat16"), ((33, 3000), "bfloat16"), ((34, 8192), "bfloat16"),
                                         ((66, 16384), "bfloat16"), ((67, 16384), "bfloat16"), ((5, 12288), "float32"),
                                         ((8, 32768), "bfloat16"), ((9, 32768), "float16"), ((3, 20000), "bfloat16"),
                                         ((8, 16384), "float32")], ids=str)
def test_small_and_large_launches(op, shape, dtype, rng):
    check_op(op, rng, shape, DTYPES[dtype])
