"""What only layer_norm and rms_norm have: memory-efficient mode, statistics on hard rows,
normalization over several axes, epsilon, and parameter dtypes."""

import numpy as np
import pytest

import jax
from jax.ad_checkpoint import print_saved_residuals
from jax.core import ShapedArray
import jax.numpy as jnp

from cases import (
    BF16, DTYPES, F32, LAYER_NORM, NORMS, RMS_NORM, UNIT_ROUNDOFF, as_f64, assert_close,
    check_op, make_cotangent, make_params, make_x, op_and_param_subsets, op_params, run_both, tolerance,
)

ALL_DTYPES = pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])


# ---------------------------------------------------------------------------------------------
# Memory-efficient mode


@op_params(NORMS)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("memory_efficient", [False, True], ids=["default", "memory_efficient"])
def test_saved_residuals(op, dtype, memory_efficient, rng, capsys):
    """Reverse mode keeps y instead of x in memory-efficient mode, and no mean."""
    dtype = DTYPES[dtype]
    x = make_x(op, rng, (6, 48), dtype)
    params = make_params(op, rng, (48,), F32)
    print_saved_residuals(lambda x, *p: op.fn(x, *p, memory_efficient=memory_efficient), x, *params)
    saved = capsys.readouterr().out.splitlines()
    big = [line for line in saved if line.startswith(ShapedArray((6, 48), dtype).str_short(short_dtypes=True) + " ")]
    assert len(big) == 1, saved
    assert ("output of jaxnorm_norm_fwd" if memory_efficient else "from the argument") in big[0], saved
    rows = [line for line in saved if line.startswith(ShapedArray((6,), F32).str_short(short_dtypes=True) + " ")]
    assert len(rows) == (2 if op is LAYER_NORM and not memory_efficient else 1), saved  # (mean,) rstd


@op_and_param_subsets()
@ALL_DTYPES
def test_memory_efficient_matches_reference(op, names, dtype, rng):
    # bounded_scale: x_hat = (y - bias) / scale amplifies y's rounding by 1/|scale|.
    check_op(op, rng, (5, 1024), DTYPES[dtype], names=names, bounded_scale=True, memory_efficient=True)


# Rows for the cluster tiles, the widest with the backward's scale/bias partials in shared memory;
# 2400 x 9000: RMSNorm's 256 x 8 backward tile, the scale held, several rows a worker.
@op_params(NORMS)
@pytest.mark.parametrize("shape", [(64, 32768), (48, 262144), (2400, 9000)], ids=str)
@pytest.mark.wide
def test_memory_efficient_wide_rows(op, shape, rng):
    check_op(op, rng, shape, BF16, bounded_scale=True, memory_efficient=True)


# The staged forwards (staged_fwd.cuh): a persistent grid whose workers take several rows each, so
# its row buffers and their mbarrier phases turn over; a partial last segment (200000, 100000,
# 60000, 30000 columns); with and without the scale (16-bit LayerNorm's one-shot tiles alike).
# 16-bit RMSNorm's clusters of 512 threads x 4 packs, of 16 (262144, 200000) and of 4 (60000: 300
# rows, more than its workers); float32 clusters of 16 of 512 x 8 (262144: LayerNorm's bias read
# from L2, not held) and of 512 x 4 (100000), and clusters of 4 of 512 x 4 (30000: 300 rows).
@op_and_param_subsets()
@pytest.mark.parametrize("shape,dtype", [((40, 262144), "bfloat16"), ((24, 200000), "float16"), ((300, 60000), "bfloat16"),
                                         ((40, 262144), "float32"), ((24, 100000), "float32"),
                                         ((300, 30000), "float32")], ids=str)
@pytest.mark.wide
def test_many_wide_rows(op, names, shape, dtype, rng):
    check_op(op, rng, shape, DTYPES[dtype], names=names)


# Launches of at least 16 rows an SM (2112 on 132 SMs, 2368 on 148) take the wide forward tiles
# (tile_choice.h, fwd_launch_tile): rows of one 512 x 8 tile in one CTA (float32 16384, bf16
# 32768, fp16 24576) and, for float32, 512 x 8 clusters (20000: a cluster of 2, staged, a partial
# last segment); 16-bit LayerNorm's rows of 8193-16384 columns one 256 x 8 CTA (12288, 16384 and
# 9000, whose last warp's packs lie partly past the row; RMSNorm's take 512 x 4 there), of
# 4097-8192 one 128 x 8 CTA (8192, 6000), of 2049-4096 one 64 x 8 CTA (4096, 3000). 16-bit
# RMSNorm's backward takes 256 x 8 with its shared memory sized to the row at 8193-10240 (9000,
# 10000; tile_choice.h, half_wide_rows), 512 x 4 at 12288, as LayerNorm's does.
@op_params(NORMS)
@pytest.mark.parametrize("shape,dtype", [((2400, 16384), "float32"), ((2400, 20000), "float32"),
                                         ((2400, 32768), "bfloat16"), ((2400, 24576), "float16"),
                                         ((2400, 12288), "bfloat16"), ((2400, 16384), "float16"),
                                         ((2400, 9000), "bfloat16"), ((2400, 10000), "float16"),
                                         ((2400, 8192), "float16"),
                                         ((2400, 6000), "bfloat16"), ((2400, 4096), "bfloat16"),
                                         ((2400, 3000), "float16")], ids=str)
@pytest.mark.wide
def test_many_rows_wide_tiles(op, shape, dtype, rng):
    check_op(op, rng, shape, DTYPES[dtype])


# Rows whose last warp of packs ends past the row (width not a multiple of 256 columns), in the
# CTA-a-row backward tiles, which store each thread's scale/bias gradient partials a pack at a time
# (row_tiles.cuh): the lanes past the row must store nothing. 4000 bf16 columns: a 256-thread
# tile; 8000: 512 threads; 20000: the wide tile in a cluster of 2, partials in shared memory;
# 4000 float32 columns: 256 threads of 4-float packs. (RMSNorm's 256 x 8 backward tile at 10000
# columns, in launches of 2112 rows or more, is test_many_rows_wide_tiles'.)
@op_params(NORMS)
@pytest.mark.parametrize("shape,dtype", [((64, 4000), "bfloat16"), ((40, 8000), "bfloat16"),
                                         ((24, 20000), "bfloat16"),
                                         ((64, 4000), "float32")], ids=str)
def test_partial_warp_rows(op, shape, dtype, rng):
    check_op(op, rng, shape, DTYPES[dtype])


# The plain 16-bit RMSNorm backward's rows of 520-896 columns, in launches of at least 64 rows an
# SM (8448 on 132 SMs, 9472 on 148), take a warp of 4 packs a row, four rows a CTA, the scale in
# shared memory, the next rows staged by cp.async (row_tiles.cuh, warp_staged_bwd): widths ending
# in a partial pack set (520, 776) and the bound (896), with and without the scale, each worker
# taking several rows (so the stages wrap) and, at 9501 rows, a last CTA with rows for some of its
# warps only; past the bound (904) and LayerNorm's rows take 64 threads (the controls).
@op_and_param_subsets()
@pytest.mark.parametrize("shape,dtype", [((9500, 520), "bfloat16"), ((9501, 776), "float16"),
                                         ((9500, 896), "bfloat16"), ((9500, 904), "float16")], ids=str)
@pytest.mark.wide
def test_warp_rows(op, names, shape, dtype, rng):
    check_op(op, rng, shape, DTYPES[dtype], names=names)


# ---------------------------------------------------------------------------------------------
# Hard rows


def test_large_mean_layer_norm(rng):
    """Statistics of a row with mean 1e4 and unit variance: a one-pass E[x^2] - E[x]^2 in
    float32 would lose every digit of the variance (1e8 * 2^-24 ~ 6 > 1)."""
    x = jnp.asarray(1e4 + rng.normal(size=(4, 1000)), F32)
    ct = make_cotangent(rng, x)
    (y, (dx, _, _)), (y_ref, (dx_ref, _, _)) = run_both(LAYER_NORM, x, (None, None), ct)
    for a, e in ((y, y_ref), (dx, dx_ref)):
        err = np.abs(as_f64(a) - as_f64(e)).max() / np.abs(as_f64(e)).max()
        assert err <= 1e-3, err


@ALL_DTYPES
def test_constant_rows_layer_norm(dtype, rng):
    """Zero variance: rstd = epsilon^-1/2 and the output is exactly the bias. The constants are
    multiples of 1/4, so every partial sum (any order, any merge) and the mean are exact and
    x - mean is exactly 0."""
    dtype = DTYPES[dtype]
    rows, width, eps = 6, 1000, 1e-6
    c = rng.integers(1, 17, size=(rows, 1)) * rng.choice([-0.25, 0.25], size=(rows, 1))
    x = jnp.asarray(np.broadcast_to(c, (rows, width)), dtype)
    params = make_params(LAYER_NORM, rng, (width,), dtype)
    ct = make_cotangent(rng, x)
    actual, expected = run_both(LAYER_NORM, x, params, ct, epsilon=eps)
    (y, (dx, dscale, dbias)), (_, (dx_ref, _, dbias_ref)) = actual, expected
    np.testing.assert_array_equal(as_f64(y), np.broadcast_to(as_f64(params[1]), (rows, width)))
    # x_hat is exactly 0, so nothing reaches the scale.
    np.testing.assert_array_equal(as_f64(dscale), 0.0)
    # dx = rstd * (g - mean(g)) with rstd = epsilon^-1/2: its terms are rstd * |g|.
    g = np.abs(as_f64(ct) * as_f64(params[0]))
    tol = tolerance(dtype, width)
    assert_close(dx, dx_ref, tol=tol, mag=eps**-0.5 * (g + g.mean(1, keepdims=True)), what="dx")
    assert_close(dbias, dbias_ref, tol=tol, mag=np.abs(as_f64(ct)).sum(0), what="dbias")


@op_params(NORMS)
@ALL_DTYPES
def test_constant_rows_arbitrary_value(op, dtype, rng):
    """Constant rows of arbitrary values stay finite. For layer_norm the mean itself may be off
    by a few float32 ulps of |c| (merge order), which rstd = epsilon^-1/2 multiplies: the
    output is the bias up to that."""
    dtype = DTYPES[dtype]
    rows, width, eps = 6, 1000, 1e-6
    c = rng.uniform(0.5, 4, size=(rows, 1)) * rng.choice([-1, 1], size=(rows, 1))
    x = jnp.asarray(np.broadcast_to(c, (rows, width)), dtype)
    params = make_params(op, rng, (width,), dtype)
    ct = make_cotangent(rng, x)
    (y, grads), (y_ref, _) = run_both(op, x, params, ct, epsilon=eps)
    for a in (y, *grads):
        assert np.isfinite(as_f64(a)).all()
    if op is LAYER_NORM:
        s, b = as_f64(params[0]), as_f64(params[1])
        cx = np.abs(as_f64(x)[:, :1])
        bound = 2 * UNIT_ROUNDOFF[dtype] * np.abs(b) + np.abs(s) * eps**-0.5 * 8 * 2.0**-24 * cx
        assert (np.abs(as_f64(y) - b) <= bound).all()
    else:
        # c * rstd * scale: products only, so relative accuracy.
        assert_close(y, y_ref, tol=tolerance(dtype, width), mag=np.abs(as_f64(y_ref)))


# ---------------------------------------------------------------------------------------------
# Axes, epsilon and parameter dtypes


@op_params(NORMS)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize(
    "shape,axis",
    [((4, 6, 7), (1, 2)), ((3, 2, 5, 9), (-3, -2, -1)), ((2, 3, 8, 130), (-2, -1))],
    ids=str,
)
def test_tuple_of_trailing_axes(op, dtype, shape, axis, rng):
    """Normalizing over several trailing axes at once, with scale/bias shaped like them."""
    check_op(op, rng, shape, DTYPES[dtype], axis=axis)


@op_params(NORMS)
@pytest.mark.parametrize("epsilon", [0.0, 1e-3, 0.5])
def test_epsilon(op, epsilon, rng):
    # epsilon 0.5 is comparable to the variance of the data, so a dropped epsilon shows.
    check_op(op, rng, (5, 96), F32, epsilon=epsilon)


@pytest.mark.parametrize("x_dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("param_dtype", ["float32", "bfloat16", "float16", "float64"])
def test_any_param_dtype(x_dtype, param_dtype, rng):
    """Scale and bias of any float dtype; their gradients come back in that dtype."""
    check_op(LAYER_NORM, rng, (4, 257), DTYPES[x_dtype], param_dtype=DTYPES[param_dtype])

