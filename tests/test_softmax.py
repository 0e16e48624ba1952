"""What only softmax and log_softmax have: masks, infinite and extreme logits, and arbitrary
axes, all against jax.nn (through jaxnorm.reference) in float64."""

import numpy as np
import pytest

import jax
import jax.numpy as jnp

from cases import (
    DTYPES, F32, LOG_SOFTMAX, SOFTMAXES, as_f64, assert_close, check_op, make_cotangent,
    make_x, op_params, result_tolerance, run_both, term_magnitudes, to64, tolerance,
)

ALL_DTYPES = pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
ROWS, COLS = 6, 50


def tolerances(op, dtype, width):
    """(output, gradient) tolerances."""
    return (result_tolerance(op, "y", dtype, dtype, width), result_tolerance(op, "x", dtype, dtype, width))


def check_masked(op, rng, x, where):
    """Forward against jax.nn with `where`; gradients exactly zero at masked positions and
    against jax.nn in every row with something left unmasked (jax.nn's own gradient of a fully
    masked row is not defined)."""
    ct = make_cotangent(rng, x)
    (y, (dx,)), (y_ref, (dx_ref,)) = run_both(op, x, (), ct, where=where)
    keep = np.broadcast_to(np.asarray(where, bool), x.shape)
    live = keep.any(-1)
    mags = term_magnitudes(op, x, (), ct, y_ref, where=where)
    tol_y, tol_dx = tolerances(op, x.dtype, x.shape[-1])
    assert_close(y, y_ref, tol=tol_y, mag=mags["y"], what=f"{op} output")
    np.testing.assert_array_equal(as_f64(dx)[~keep], 0.0)
    dx_live, dx_ref_live = np.asarray(dx)[live], np.asarray(dx_ref)[live]
    assert_close(dx_live, dx_ref_live, tol=tol_dx, mag=mags["x"][live], what=f"{op} dx")
    return y, dx


@op_params(SOFTMAXES)
@ALL_DTYPES
def test_random_mask(op, dtype, rng):
    x = make_x(op, rng, (ROWS, COLS), DTYPES[dtype])
    where = rng.random((ROWS, COLS)) < 0.7
    where[:, 0] = True  # no row fully masked here; that case has its own test
    check_masked(op, rng, x, jnp.asarray(where))


@op_params(SOFTMAXES)
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("cols", [32768, 4096, 3000])
def test_mask_on_cluster_rows(op, dtype, cols, rng):
    """Few rows wide enough for the GPU's spread launches: 32768 16-bit columns split over clusters
    of 16 CTAs, whose threads may hold the row as loaded with the masked elements set to -inf;
    4096 and 3000 replicated over 4 CTAs that each store a slice (3000: packs past the row's
    end). Random and banded masks, a fully masked row, and a row masked but for one element."""
    rows = 5
    x = make_x(op, rng, (rows, cols), DTYPES[dtype])
    where = rng.random((rows, cols)) < 0.7
    where[2, : cols // 2] = False  # half the row's threads hold nothing unmasked
    where[3] = False
    where[4] = False
    where[4, cols * 3 // 8] = True
    y, dx = check_masked(op, rng, x, jnp.asarray(where))
    np.testing.assert_array_equal(as_f64(y)[3], -np.inf if op is LOG_SOFTMAX else 0.0)
    np.testing.assert_array_equal(as_f64(dx)[3], 0.0)


# Launches of at least 16 rows an SM (2112 on 132 SMs, 2368 on 148) of 1025-2048 packs take one
# 256-thread CTA of 8 packs a row, 16-bit rows of 513-768 packs one 128-thread CTA of 8, the row
# held as loaded (tile_choice.h, with_cluster_cta_alone, with_narrow_cta_alone): 16-bit 12288 and
# 16384 columns, 9000 (the last warp's packs partly past the row), float32 6000; 16-bit 6000; past
# the 128-thread CTA's bound 16-bit 8192 and float32 3000 (256 x 4); masked (9000 and 6000), with a
# row masked but for its last element.
@op_params(SOFTMAXES)
@pytest.mark.parametrize("shape,dtype", [((2400, 12288), "bfloat16"), ((2400, 16384), "float16"),
                                         ((2400, 9000), "bfloat16"), ((2400, 6000), "float32"),
                                         ((2400, 8192), "float16"), ((2400, 6000), "bfloat16"),
                                         ((2400, 3000), "float32")], ids=str)
@pytest.mark.wide
def test_many_rows_cta_alone(op, shape, dtype, rng):
    check_op(op, rng, shape, DTYPES[dtype])


@op_params(SOFTMAXES)
@pytest.mark.parametrize("cols", [9000, 6000])
@pytest.mark.wide
def test_mask_many_rows_cta_alone(op, cols, rng):
    x = make_x(op, rng, (2400, cols), DTYPES["bfloat16"])
    where = rng.random(x.shape) < 0.7
    where[7] = False
    where[7, -1] = True
    check_masked(op, rng, x, jnp.asarray(where))


@op_params(SOFTMAXES)
@pytest.mark.parametrize("shape", [(COLS,), (ROWS, 1), (1, COLS)], ids=str)
def test_broadcast_mask(op, shape, rng):
    where = rng.random(shape) < 0.6
    where.flat[0] = True
    where.flat[-1] = False  # (ROWS, 1): some rows fully masked, others not at all
    check_masked(op, rng, make_x(op, rng, (ROWS, COLS), F32), jnp.asarray(where))


@op_params(SOFTMAXES)
@ALL_DTYPES
def test_fully_masked_rows(op, dtype, rng):
    """A row with nothing to normalize: softmax 0 and log_softmax -inf (like jax.nn), and no
    gradient."""
    x = make_x(op, rng, (ROWS, COLS), DTYPES[dtype])
    where = rng.random((ROWS, COLS)) < 0.5
    where[:, 0] = True
    where[[1, 4]] = False
    y, dx = check_masked(op, rng, x, jnp.asarray(where))
    empty = -np.inf if op is LOG_SOFTMAX else 0.0
    np.testing.assert_array_equal(as_f64(y)[[1, 4]], empty)
    np.testing.assert_array_equal(as_f64(dx)[[1, 4]], 0.0)


@op_params(SOFTMAXES)
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("cols", [48, 1000, 4096, 12288, 40000])
def test_mask_rows_not_finite(op, dtype, cols, rng):
    """Masked rows whose max or sum is not finite: a NaN or +inf kept (the CPU kernel once wrote
    NaN at their masked positions), kept elements all -inf, a fully masked row; and NaN, +inf and
    the largest finite value under the mask of rows otherwise plain, which must drop out (a kernel
    may store plain rows without reading the mask again: results/next-rows). Widths of every tile
    shape (4-pack CTAs of floats, 8-pack CTAs of 16-bit rows as loaded, clusters); jax.nn's NaN
    and infinity patterns exactly."""
    x = np.asarray(make_x(op, rng, (8, cols), DTYPES[dtype])).astype(np.float32)
    where = rng.random(x.shape) < 0.7
    where[:, 0] = True
    x[0, 5], where[0, 5] = np.nan, True
    x[1, 7], where[1, 7] = np.inf, True
    x[2] = -np.inf
    where[3] = False
    hidden = ~where[4:7]
    x[4][hidden[0]] = np.nan
    x[5][hidden[1]] = np.inf
    x[6][hidden[2]] = float(jnp.finfo(DTYPES[dtype]).max)
    xj, wj = jnp.asarray(x, DTYPES[dtype]), jnp.asarray(where)
    y = as_f64(op.fn(xj, where=wj))
    y_ref = as_f64(op.ref(xj, where=wj))
    np.testing.assert_array_equal(np.isnan(y), np.isnan(y_ref))
    np.testing.assert_array_equal(np.isposinf(y), np.isposinf(y_ref))
    np.testing.assert_array_equal(np.isneginf(y), np.isneginf(y_ref))
    np.testing.assert_array_equal(y[~where], -np.inf if op is LOG_SOFTMAX else 0.0)
    # The suite's term magnitudes, 0 where the rows' infinities make them NaN (those outputs are
    # NaN or infinite, compared exactly above).
    with np.errstate(invalid="ignore", over="ignore"):
        mag = term_magnitudes(op, xj, (), make_cotangent(rng, xj), y_ref, where=where)["y"]
    assert_close(y, y_ref, tol=tolerances(op, xj.dtype, cols)[0], mag=np.nan_to_num(mag, nan=0.0, posinf=0.0),
                 what=f"{op} output")


@op_params(SOFTMAXES)
def test_integer_mask_acts_like_bool(op, rng):
    x = make_x(op, rng, (ROWS, COLS), F32)
    where = rng.random((ROWS, COLS)) < 0.5
    as_int = op.fn(x, where=jnp.asarray(where, jnp.int32))
    as_bool = op.fn(x, where=jnp.asarray(where))
    np.testing.assert_array_equal(np.asarray(as_int), np.asarray(as_bool))


@op_params(SOFTMAXES)
def test_vmap_with_batched_mask(op, rng):
    x = make_x(op, rng, (3, ROWS, COLS), F32)
    where = jnp.asarray(rng.random((3, ROWS, COLS)) < 0.6)
    ct = make_cotangent(rng, x)

    def f(x, where, ct):
        y, pullback = jax.vjp(lambda x: op.fn(x, where=where), x)
        return y, pullback(ct)[0]

    batched = jax.jit(jax.vmap(f))(x, where, ct)
    for i in range(3):
        for a, e in zip(batched, f(x[i], where[i], ct[i])):
            # Same rows, possibly another kernel configuration: equal up to reduction order.
            finite = as_f64(e)[np.isfinite(as_f64(e))]
            assert_close(a[i], e, tol=tolerance(F32, COLS), mag=float(np.abs(finite).max()))


@op_params(SOFTMAXES)
@ALL_DTYPES
def test_negative_infinity_entries(op, dtype, rng):
    """-inf logits drop out of the normalizer: softmax 0 there, log_softmax -inf."""
    x = np.asarray(make_x(op, rng, (ROWS, COLS), DTYPES[dtype])).astype(np.float32)
    x[rng.random((ROWS, COLS)) < 0.3] = -np.inf
    x[:, 0] = rng.normal(size=ROWS)
    check_op_on(op, rng, jnp.asarray(x, DTYPES[dtype]))


def check_op_on(op, rng, x):
    ct = make_cotangent(rng, x)
    (y, (dx,)), (y_ref, (dx_ref,)) = run_both(op, x, (), ct)
    mags = term_magnitudes(op, x, (), ct, y_ref)
    tol_y, tol_dx = tolerances(op, x.dtype, x.shape[-1])
    assert_close(y, y_ref, tol=tol_y, mag=mags["y"], what=f"{op} output")
    assert_close(dx, dx_ref, tol=tol_dx, mag=mags["x"], what=f"{op} dx")
    return y, dx


@pytest.mark.skipif(jax.default_backend() == "cpu",
                    reason="XLA's CPU runtime flushes subnormals in its threads, for its own ops and ours alike")
@op_params(SOFTMAXES)
@ALL_DTYPES
def test_outputs_below_the_normal_range(op, dtype, rng):
    """exp(x - max) down to e^-110, below float's (and bfloat16's) smallest normal number e^-87:
    those softmax outputs are subnormal in float32 and bfloat16 and must not be flushed to 0
    (XLA's GPU kernels keep them)."""
    x = np.tile(np.linspace(0.0, -110.0, 1024), (4, 1))
    x[1:] += rng.normal(size=(3, 1024))
    check_op_on(op, rng, jnp.asarray(x, DTYPES[dtype]))


@op_params(SOFTMAXES)
def test_all_negative_infinity_row_is_nan(op, rng):
    """Like jax.nn: a row of only -inf has no maximum to shift by, and comes out NaN."""
    x = np.array(make_x(op, rng, (3, COLS), F32))
    x[1] = -np.inf
    y = np.asarray(op.fn(jnp.asarray(x)))
    y_ref = np.asarray(op.ref(jnp.asarray(x)))
    np.testing.assert_array_equal(np.isnan(y), np.isnan(y_ref))
    assert np.isnan(y[1]).all() and not np.isnan(y[[0, 2]]).any()


@op_params(SOFTMAXES)
@ALL_DTYPES
def test_extreme_logits(op, dtype, rng):
    """Logits up to the dtype's largest magnitude: the shift by the row maximum keeps every
    exponent <= 0, so nothing overflows or turns NaN, and the result matches float64."""
    dtype = DTYPES[dtype]
    big = float(jnp.finfo(dtype).max)
    x = np.asarray(make_x(op, rng, (6, COLS), dtype)).astype(np.float64)
    x[0, :2] = big  # two equal maxima at the top of the range
    x[1, :2] = -big  # far below the rest of the row
    x[2] = big * rng.uniform(0.5, 1.0, COLS)  # a whole row near the top
    x[3] = -big * rng.uniform(0.5, 1.0, COLS)  # a whole row near the bottom
    x[4, 0], x[4, 1] = big, -big  # both ends in one row: x - max is -2 * big
    x[5] = big
    x = jnp.asarray(x, dtype)
    ct = make_cotangent(rng, x)
    (y, (dx,)), (y_ref, (dx_ref,)) = run_both(op, x, (), ct)
    assert not np.isnan(as_f64(y)).any() and not np.isnan(as_f64(dx)).any()
    # The exact log_softmax of -big next to +big is -2 * big, beyond the dtype: rounded to it
    # that is -inf. Everything else is finite.
    with np.errstate(over="ignore"):
        y_ref = np.asarray(y_ref).astype(dtype)
    expected_inf = np.zeros(x.shape, bool)
    if op is LOG_SOFTMAX:
        expected_inf[4, 1] = True
    np.testing.assert_array_equal(np.isinf(as_f64(y)), expected_inf)
    assert np.isfinite(as_f64(dx)).all()
    mags = term_magnitudes(op, x, (), ct, y_ref)
    tol_y, tol_dx = tolerances(op, dtype, COLS)
    assert_close(y, y_ref, tol=tol_y, mag=mags["y"], what=f"{op} output")
    assert_close(dx, dx_ref, tol=tol_dx, mag=mags["x"], what=f"{op} dx")


@op_params(SOFTMAXES)
@ALL_DTYPES
@pytest.mark.parametrize("width", [1, 1000])
def test_equal_logits_give_uniform_rows(op, dtype, width, rng):
    dtype = DTYPES[dtype]
    big = float(jnp.finfo(dtype).max)
    c = np.concatenate([rng.normal(size=3) * 10, [big, -big, 1e4 if dtype != np.float16 else 6e4]])
    x = jnp.asarray(np.broadcast_to(c[:, None], (len(c), width)), dtype)
    y = op.fn(x)
    # exp(0) = 1 exactly and the row sums to `width` exactly: what is left is one reciprocal or
    # log (whose error is absolute), and the rounding to the dtype.
    expected = np.full(y.shape, -np.log(width) if op is LOG_SOFTMAX else 1.0 / width)
    mag = np.abs(expected) + (op is LOG_SOFTMAX)
    assert_close(y, expected, tol=tolerance(dtype, width), mag=mag)


@op_params(SOFTMAXES)
@pytest.mark.parametrize(
    "shape,axis",
    [
        ((4, 37, 5), 1),
        ((37, 6), 0),
        ((3, 4, 37), -2),
        ((5, 7, 9), None),
        ((4, 5, 37), (0, 2)),
        ((3, 6, 37), (-1, -2)),
        ((2, 3, 4, 5), (1, 3)),
    ],
    ids=str,
)
def test_axes(op, shape, axis, rng):
    check_op(op, rng, shape, F32, axis=axis)


@op_params(SOFTMAXES)
def test_masked_non_trailing_axis(op, rng):
    x = make_x(op, rng, (COLS, ROWS), F32)
    where = rng.random((COLS, ROWS)) < 0.7
    where[0] = True
    ct = make_cotangent(rng, x)
    (y, (dx,)), (y_ref, (dx_ref,)) = run_both(op, x, (), ct, axis=0, where=jnp.asarray(where))
    mags = term_magnitudes(op, x, (), ct, y_ref, axis=0, where=where)
    tol_y, tol_dx = tolerances(op, F32, COLS)
    assert_close(y, y_ref, tol=tol_y, mag=mags["y"], what=f"{op} output")
    assert_close(dx, dx_ref, tol=tol_dx, mag=mags["x"], what=f"{op} dx")
    np.testing.assert_array_equal(as_f64(dx)[~where], 0.0)


@op_params(SOFTMAXES)
def test_scalar_with_axis_none(op, rng):
    x = jnp.asarray(rng.normal(), F32)
    y = op.fn(x, axis=None)
    expected = op.ref(to64(x), axis=None)  # 1 or 0
    assert y.shape == () and y.dtype == F32
    assert_close(y, expected, tol=tolerance(F32, 1), mag=1.0)


@op_params(SOFTMAXES)
def test_zero_width_axis_is_empty_like_jax_nn(op):
    x = jnp.ones((3, 0), F32)
    y = op.fn(x)
    assert (y.shape, y.dtype) == (op.ref(x).shape, F32)
