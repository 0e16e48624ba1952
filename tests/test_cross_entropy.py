"""softmax_cross_entropy: loss and dlogits against jaxnorm.reference in float64 (and optax's
function where it is installed), every option, masks, labels out of range, extreme logits,
transforms, and the memory the compiled step holds."""

import math
import re

import numpy as np
import pytest

import jax
import jax.numpy as jnp

import jaxnorm
from jaxnorm import reference

from cases import BF16, DTYPES, F16, F32, F64, UNIT_ROUNDOFF, Tol, as_f64, assert_close, to64, tolerance

ALL_DTYPES = pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
OPTIONS = {
    "plain": {},
    "smoothing": {"label_smoothing": 0.1},
    "z_loss": {"z_loss": 1e-3},
    "all": {"label_smoothing": 0.2, "z_loss": 1e-2, "ignore_index": -100},
}


def make_logits(rng, shape, dtype, spread=3.0):
    return jnp.asarray(spread * rng.normal(size=shape), dtype)


def make_labels(rng, batch_shape, cols, dtype=np.int32):
    return jnp.asarray(rng.integers(0, cols, batch_shape), dtype)


def run_both(x, labels, ct, **kw):
    """(loss, dlogits) of jaxnorm and of the reference on the same values in float64, one jit."""

    @jax.jit
    def run(x, labels, ct):
        def both(fn, x):
            loss, pullback = jax.vjp(lambda x: fn(x, labels, **kw), x)
            return loss, pullback(ct.astype(loss.dtype))[0]

        return both(jaxnorm.softmax_cross_entropy, x), both(reference.softmax_cross_entropy, to64(x))

    return run(x, labels, ct.astype(F32))


def magnitudes(x, labels, ct, *, axis=-1, where=None, label_smoothing=0.0, z_loss=0.0, **_):
    """The magnitudes of the terms the loss and each dlogit are computed from, in float64 (the
    error of a - b is of order u (|a| + |b|) however small a - b is): the loss from (max - x_y),
    log(sum), the smoothing mean and z lse^2; dlogit j from p_j, whose exp argument x_j - lse
    carries lse's rounding, u |lse|."""
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    axes = tuple(sorted(a % x.ndim for a in axes))
    batch = [i for i in range(x.ndim) if i not in axes]
    perm = batch + list(axes)
    xs = np.transpose(as_f64(x), perm)
    xs = xs.reshape(*np.shape(labels), -1)
    keep = np.ones(xs.shape, bool)
    if where is not None and np.ndim(where) == x.ndim:
        keep = np.transpose(np.broadcast_to(np.asarray(where, bool), x.shape), perm).reshape(xs.shape)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        kx = np.where(keep, xs, -np.inf)
        m = np.max(kx, axis=-1, keepdims=True)
        m = np.where(np.isfinite(m), m, 0.0)
        s = np.sum(np.exp(kx - m), axis=-1, keepdims=True)
        lse = m + np.log(s)
        lab = np.clip(np.asarray(labels), 0, xs.shape[-1] - 1)[..., None]
        x_y = np.take_along_axis(xs, lab, axis=-1)
        ax = np.where(keep & np.isfinite(xs), np.abs(xs), 0.0)
        n = np.maximum(keep.sum(-1, keepdims=True), 1)
        loss = np.abs(m - x_y) + np.abs(np.log(s)) + 1 + label_smoothing * (np.abs(m) + ax.sum(-1, keepdims=True) / n)
        loss = loss + z_loss * 2 * np.abs(lse) * (np.abs(m) + np.abs(np.log(s)) + 1)
        p = np.where(keep, np.exp(kx - lse), 0.0)
        a = 1 + 2 * z_loss * np.abs(lse)
        g = np.abs(np.asarray(ct, np.float64))[..., None]
        dx = g * (p * a * (1 + np.abs(lse) + ax) + label_smoothing / n + 1 + z_loss * 2 * p * np.abs(lse))
    dx = np.transpose(dx.reshape([x.shape[i] for i in perm]), np.argsort(perm))
    # A row with nothing kept has no terms (its loss and gradient are exact zeros).
    return np.nan_to_num(loss[..., 0], nan=0.0), np.nan_to_num(dx, nan=0.0)


def check(x, labels, rng, **kw):
    """Loss and dlogits against the float64 reference at the accuracy float32 arithmetic on these
    terms gives: the loss is float32 (tolerance(float32)), dlogits are rounded to x's dtype."""
    ct = jnp.asarray(rng.normal(size=np.shape(labels)), F32)
    (loss, dx), (loss_ref, dx_ref) = run_both(x, labels, ct, **kw)
    assert loss.dtype == F32 and loss.shape == labels.shape
    assert dx.dtype == x.dtype and dx.shape == x.shape
    mag_loss, mag_dx = magnitudes(x, labels, ct, **kw)
    axis = kw.get("axis", -1)
    width = math.prod(x.shape[a] for a in ((axis,) if isinstance(axis, int) else axis))
    assert_close(loss, loss_ref, tol=tolerance(F32, width), mag=mag_loss, what="loss")
    assert_close(dx, dx_ref, tol=tolerance(x.dtype, width), mag=mag_dx, what="dlogits")
    return loss, dx


# ---- against the reference ----


@ALL_DTYPES
@pytest.mark.parametrize("option", list(OPTIONS))
@pytest.mark.parametrize("shape", [(6, 1), (5, 7), (4, 50), (3, 1000), (2, 3, 520), (2, 4099)], ids=str)
def test_matches_reference(dtype, option, shape, rng):
    x = make_logits(rng, shape, DTYPES[dtype])
    labels = make_labels(rng, shape[:-1], shape[-1])
    if "ignore_index" in OPTIONS[option]:
        labels = labels.reshape(-1).at[0].set(-100).reshape(labels.shape)
    check(x, labels, rng, **OPTIONS[option])


@pytest.mark.wide(cpu=True)
@pytest.mark.parametrize("cols", [32000, 50257], ids=str)
def test_vocabulary_rows(cols, rng):
    """A real vocabulary, and GPT-2's odd one (no 16-byte packs: the CUDA loop kernels)."""
    x = make_logits(rng, (3, cols), BF16)
    check(x, make_labels(rng, (3,), cols), rng, label_smoothing=0.1, z_loss=1e-4)


@pytest.mark.wide
@ALL_DTYPES
@pytest.mark.parametrize("cols", [16384, 128256, 262144, 262152], ids=str)
def test_wide_rows(dtype, cols, rng):
    """The GPU forward's cluster tiles (to 16 CTAs a row; 16-bit rows past 262144 columns on the
    wide tile) and its loop kernel (float32 past 262144)."""
    x = make_logits(rng, (5, cols), DTYPES[dtype])
    check(x, make_labels(rng, (5,), cols), rng, label_smoothing=0.1)


@pytest.mark.wide(cpu=True)
@ALL_DTYPES
@pytest.mark.parametrize("option", ["plain", "all"])
@pytest.mark.parametrize("cols", [20000, 20001], ids=str)
def test_split_rows(dtype, option, cols, rng):
    """Rows the GPU forward splits into chunks (jaxnorm._ops.ce_chunks: 10 here, of 2000 columns)
    merged by a second kernel, and its backward's CTA per chunk; 20001 columns take the unpacked
    kernels. Extremes sit in different chunks of one row, so the merge rescales across them: a
    row near +1e4, one with both ends, -inf runs, a masked-out row, an ignored one."""
    dtype = DTYPES[dtype]
    big = 6e4 if dtype == np.float16 else 1e4
    x = 3 * rng.normal(size=(6, cols))
    x[0] += big
    x[1, : cols // 2] += big
    x[1, cols // 2:] -= big
    x[2, 4000:9000] = -np.inf
    kw = dict(OPTIONS[option])
    labels = make_labels(rng, (6,), cols).at[2].set(100)
    if "ignore_index" in kw:
        labels = labels.at[5].set(-100)
    where = rng.random((6, cols)) < 0.7
    where[3] = False
    where[4, 16000:] = False
    if kw.get("label_smoothing"):
        x[np.isinf(x)] = -big
    loss, dx = check(jnp.asarray(x, dtype), labels, rng, **kw)
    loss_m, dx_m = check(jnp.asarray(x, dtype), labels, rng, where=jnp.asarray(where), **kw)
    assert float(loss_m[3]) == 0.0 and not np.any(as_f64(dx_m)[3])
    if "ignore_index" in kw:
        assert float(loss[5]) == 0.0 and not np.any(as_f64(dx)[5])


@pytest.mark.wide
@pytest.mark.parametrize("shape,dtype", [((1400, 33000), "float32"), ((820, 70001), "bfloat16")], ids=str)
def test_split_rows_many(shape, dtype, rng):
    """Enough rows that the chunks keep their full width (3 of 11000, 5 of 14001 columns): the
    forward's CTAs loop over several steps before merging (float32's of 8192 columns, a partial
    last one; 70001 bf16 columns take the unpacked kernels, steps of 2048)."""
    x = make_logits(rng, shape, DTYPES[dtype])
    check(x, make_labels(rng, shape[:1], shape[1]), rng, label_smoothing=0.1)


@pytest.mark.parametrize("shape,axis", [((37, 6), 0), ((3, 37, 4), 1), ((4, 5, 6), (1, 2)), ((5, 4, 6), (0, 2))],
                         ids=str)
def test_axes(shape, axis, rng):
    x = make_logits(rng, shape, F32)
    axes = (axis,) if isinstance(axis, int) else axis
    batch = tuple(s for i, s in enumerate(shape) if i not in axes)
    labels = make_labels(rng, batch, math.prod(shape[a] for a in axes))
    check(x, labels, rng, axis=axis, label_smoothing=0.1)


def test_class_axes_in_the_order_given(rng):
    """Labels index the class axes' flattening in the order `axis` gives them, as optax's: axis
    (2, 1) is axis (1, 2) of the logits with those axes swapped (and so is the reference)."""
    x = make_logits(rng, (3, 5, 7), F32)
    labels = make_labels(rng, (3,), 35)
    swapped = jnp.swapaxes(x, 1, 2)
    for f in (jaxnorm.softmax_cross_entropy, reference.softmax_cross_entropy):
        loss, dx = jax.value_and_grad(lambda x: jnp.sum(f(x, labels, axis=(2, 1)) * jnp.arange(1.0, 4.0)))(x)
        loss_t, dx_t = jax.value_and_grad(lambda x: jnp.sum(f(x, labels, axis=(1, 2)) * jnp.arange(1.0, 4.0)))(swapped)
        np.testing.assert_allclose(loss, loss_t, rtol=1e-6)
        np.testing.assert_allclose(dx, jnp.swapaxes(dx_t, 1, 2), rtol=1e-6, atol=1e-7)
    optax = pytest.importorskip("optax")
    np.testing.assert_allclose(jaxnorm.softmax_cross_entropy(x, labels, axis=(2, 1)),
                               optax.softmax_cross_entropy_with_integer_labels(x, labels, axis=(2, 1)), rtol=2e-6)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int64, np.uint32])
def test_label_dtypes(dtype, rng):
    x = make_logits(rng, (4, 30), F32)
    labels = make_labels(rng, (4,), 30, dtype)
    np.testing.assert_array_equal(np.asarray(jaxnorm.softmax_cross_entropy(x, labels)),
                                  np.asarray(jaxnorm.softmax_cross_entropy(x, labels.astype(np.int32))))


# ---- optax, the function this replaces ----


def test_matches_optax(rng):
    optax = pytest.importorskip("optax")
    ref = optax.softmax_cross_entropy_with_integer_labels
    x = make_logits(rng, (2, 5, 300), F32)
    labels = make_labels(rng, (2, 5), 300)
    where = jnp.asarray(rng.random((2, 5, 300)) < 0.8).at[0, 1].set(False)  # a fully masked row
    row_where = jnp.asarray(rng.random((2, 5)) < 0.7)
    xt = jnp.swapaxes(x, 0, 2)
    for fn_kw, optax_kw, args in (({}, {}, (x, labels)), ({"where": where}, {"where": where}, (x, labels)),
                                  ({"where": row_where}, {"where": row_where}, (x, labels)),
                                  ({"axis": 0}, {"axis": 0}, (xt, labels.T)),
                                  # classes of axes (1, 2): 5 x 300; labels < 300, so these are < 1500
                                  ({"axis": (1, 2)}, {"axis": (1, 2)}, (x, labels[:, 0] * 5 + 4))):
        ct = jnp.asarray(rng.normal(size=args[1].shape), F32)
        ours = jax.vjp(lambda x: jaxnorm.softmax_cross_entropy(x, args[1], **fn_kw), args[0])
        theirs = jax.vjp(lambda x: ref(x, args[1], **optax_kw), args[0])
        np.testing.assert_allclose(ours[0], theirs[0], rtol=2e-6, atol=2e-6, err_msg=str(fn_kw))
        np.testing.assert_allclose(ours[1](ct)[0], theirs[1](ct)[0], rtol=2e-6, atol=2e-6, err_msg=str(fn_kw))


def test_matches_optax_bfloat16(rng):
    """optax computes and returns bfloat16; the float32 loss here is the more accurate one."""
    optax = pytest.importorskip("optax")
    x = make_logits(rng, (8, 1000), BF16)
    labels = make_labels(rng, (8,), 1000)
    ours = jaxnorm.softmax_cross_entropy(x, labels)
    theirs = optax.softmax_cross_entropy_with_integer_labels(x, labels)
    exact = optax.softmax_cross_entropy_with_integer_labels(x.astype(F32), labels)
    np.testing.assert_allclose(ours, exact, rtol=1e-5, atol=1e-5)
    # optax rounds logsumexp to bfloat16 before subtracting the label's logit: its loss is off by
    # up to a bf16 unit of the logsumexp (0.06 at 12), not of the loss (a 1.65 loss came out 1.625).
    lse = np.asarray(exact) + np.take_along_axis(np.asarray(x, np.float32), np.asarray(labels)[:, None], 1)[:, 0]
    theirs = np.asarray(theirs, np.float32)
    allowed = 2**-7 * (np.abs(theirs) + np.abs(lse))
    assert np.all(np.abs(np.asarray(ours) - theirs) <= allowed), (np.asarray(ours), theirs, allowed)


# ---- masks, ignored rows, labels out of range ----


@ALL_DTYPES
@pytest.mark.parametrize("option", ["plain", "all"])
def test_where_mask(dtype, option, rng):
    """Masked classes leave the softmax and the smoothing mean and get no gradient; the label's
    logit counts even where masked (optax); a row with nothing kept gives 0 and no gradient."""
    x = make_logits(rng, (6, 40), DTYPES[dtype])
    labels = make_labels(rng, (6,), 40)
    where = rng.random((6, 40)) < 0.6
    where[2] = False
    where[3, int(labels[3])] = False
    loss, dx = check(x, labels, rng, where=jnp.asarray(where), **OPTIONS[option])
    assert float(loss[2]) == 0.0 and not np.any(as_f64(dx)[2])
    off_label = np.ones_like(where)
    off_label[np.arange(6), np.asarray(labels)] = False
    assert not np.any(as_f64(dx)[~where & off_label])
    assert float(dx[3, int(labels[3])]) != 0.0


@pytest.mark.parametrize("shape", [(1, 40), (6, 1)], ids=str)
def test_broadcast_mask(shape, rng):
    where = rng.random(shape) < 0.6
    where.flat[0] = True
    check(make_logits(rng, (6, 40), F32), make_labels(rng, (6,), 40), rng, where=jnp.asarray(where),
          label_smoothing=0.1)


def test_per_example_where(rng):
    """`where` of the labels' shape drops examples, as optax's does; with ignore_index too."""
    x = make_logits(rng, (3, 8, 30), F32)
    labels = make_labels(rng, (3, 8), 30).at[0, 0].set(-100)
    keep = jnp.asarray(rng.random((3, 8)) < 0.6)
    loss, dx = check(x, labels, rng, where=keep, ignore_index=-100)
    dropped = ~np.asarray(keep) | (np.asarray(labels) == -100)
    assert not np.any(as_f64(loss)[dropped]) and not np.any(as_f64(dx)[dropped])
    np.testing.assert_array_equal(np.asarray(loss), np.asarray(jaxnorm.softmax_cross_entropy(
        x, jnp.where(keep, labels, -100), ignore_index=-100)))


@ALL_DTYPES
def test_ignored_rows_are_exact_zeros(dtype, rng):
    """Loss 0 and a zero gradient row, whatever the row holds (NaN and infinities included)."""
    x = np.asarray(make_logits(rng, (5, 64), DTYPES[dtype])).astype(np.float32)
    x[1, :3] = [np.nan, np.inf, -np.inf]
    labels = jnp.asarray([3, -1, 7, -1, 0], np.int32)
    x = jnp.asarray(x, DTYPES[dtype])
    loss, dx = jax.value_and_grad(lambda x: jaxnorm.softmax_cross_entropy(x, labels, ignore_index=-1).sum())(x)
    per_row = jaxnorm.softmax_cross_entropy(x, labels, ignore_index=-1)
    assert np.all(np.asarray(per_row)[[1, 3]] == 0) and np.all(np.isfinite(np.asarray(per_row)[[0, 2, 4]]))
    assert not np.any(as_f64(dx)[[1, 3]])
    check(x[jnp.array([0, 2, 4])], labels[jnp.array([0, 2, 4])], rng)
    ref_dx = jax.grad(lambda x: reference.softmax_cross_entropy(x, labels, ignore_index=-1).sum())(x)
    assert not np.any(as_f64(ref_dx)[[1, 3]]), "the spec: no gradient in an ignored row, whatever it holds"


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_labels_out_of_range_give_nan(dtype, rng):
    """Like a checked gather: a NaN loss and a NaN gradient row (every negative label included,
    which optax would wrap); the other rows are untouched."""
    cols = 20
    bad = [cols, -1, -cols, np.iinfo(np.int32).max, np.iinfo(np.int32).min]
    if dtype == np.int64:
        bad += [2**40, -(2**40)]
    labels = np.concatenate([[3], bad, [cols - 1]]).astype(dtype)
    x = make_logits(rng, (len(labels), cols), F32)
    loss, pullback = jax.vjp(lambda x: jaxnorm.softmax_cross_entropy(x, jnp.asarray(labels)), x)
    dx = pullback(jnp.ones(len(labels), F32))[0]
    assert np.isnan(np.asarray(loss)[1:-1]).all() and np.isnan(np.asarray(dx)[1:-1]).all()
    good = [0, len(labels) - 1]
    check(x[jnp.array(good)], jnp.asarray(labels[good], np.int32), rng)
    # the reference (the spec) gives the same NaN rows, in the loss and in the gradient
    ref_loss, ref_pullback = jax.vjp(lambda x: reference.softmax_cross_entropy(x, jnp.asarray(labels)), x)
    np.testing.assert_array_equal(np.isnan(np.asarray(ref_loss)), np.isnan(np.asarray(loss)))
    np.testing.assert_array_equal(np.isnan(np.asarray(ref_pullback(jnp.ones(len(labels), F32))[0])),
                                  np.isnan(np.asarray(dx)))


def test_wide_numpy_labels_out_of_range_with_x64_off(rng):
    """A numpy int64 label past int32 stays out of range (jnp would narrow it by wrapping: 2^32 + 1
    to class 1, 2^32 - 100 to an ignore_index of -100)."""
    x = make_logits(rng, (3, 4), F32)
    labels = np.array([2**32 + 1, 2**32 - 100, 3], np.int64)
    with jax.enable_x64(False):
        for kw in ({}, {"ignore_index": -100}):
            loss = np.asarray(jaxnorm.softmax_cross_entropy(x, labels, **kw))
            assert np.isnan(loss[:2]).all() and np.isfinite(loss[2]), (kw, loss)


# ---- extreme logits ----


@ALL_DTYPES
@pytest.mark.parametrize("option", ["plain", "all"])
def test_extreme_logits(dtype, option, rng):
    """Logits of +-1e4 (6e4 in float16) and -inf entries: the loss keeps its digits (lse - x_y
    is formed from max - x_y), nothing overflows."""
    dtype = DTYPES[dtype]
    big = 6e4 if dtype == np.float16 else 1e4
    x = 3 * rng.normal(size=(6, 48))
    x[0] += big  # a whole row near +big
    x[1] -= big
    x[2, :24] += big  # both ends in one row
    x[2, 24:] -= big
    x[3, 5:20] = -np.inf
    x[4, ::2] = -np.inf
    labels = np.array([1, 2, 3, 4, 1, 7], np.int32)  # row 2's label is at +big; row 3's, 4's kept
    x[5, 7] = big
    kw = dict(OPTIONS[option])
    if kw.get("label_smoothing"):
        x[np.isinf(x)] = -big  # with smoothing, a kept -inf makes the loss +inf (own test)
    loss, _ = check(jnp.asarray(x, dtype), jnp.asarray(labels), rng, **kw)
    assert np.isfinite(np.asarray(loss)).all()


def test_infinities(rng):
    """-inf at the label: +inf loss; a kept -inf with smoothing: +inf loss (the formula's mean),
    finite gradient; a +inf logit: lse = +inf (as jax.nn.logsumexp), so +inf loss, or NaN when
    the label's logit is the +inf one; a NaN logit: NaN."""
    x = np.array(make_logits(rng, (5, 16), F32))
    x[0, 3] = -np.inf
    x[1, 5] = -np.inf
    x[2, 0] = np.inf
    x[3, 4] = np.inf
    x[4, 9] = np.nan
    labels = jnp.asarray([3, 2, 1, 4, 0], np.int32)
    loss = np.asarray(jaxnorm.softmax_cross_entropy(jnp.asarray(x), labels))
    ref = np.asarray(reference.softmax_cross_entropy(jnp.asarray(x, F64), labels))
    np.testing.assert_array_equal(loss[[0, 2]], np.inf)
    assert np.isnan(loss[[3, 4]]).all() and np.isfinite(loss[1])
    np.testing.assert_array_equal(np.isnan(loss), np.isnan(ref))
    smoothed = lambda x: jaxnorm.softmax_cross_entropy(x, labels[:2], label_smoothing=0.1)  # noqa: E731
    assert np.asarray(smoothed(jnp.asarray(x[:2])))[1] == np.inf
    assert np.isfinite(np.asarray(jax.grad(lambda x: smoothed(x)[1])(jnp.asarray(x[:2])))).all()


# ---- transforms ----


def test_vmap(rng):
    x = make_logits(rng, (3, 5, 33), F32)
    labels = make_labels(rng, (3, 5), 33)
    f = lambda x, y: jax.value_and_grad(lambda x: jnp.sum(jaxnorm.softmax_cross_entropy(x, y, label_smoothing=0.1)))(x)  # noqa: E731
    loss, dx = jax.jit(jax.vmap(f))(x, labels)
    shared = jax.jit(jax.vmap(f, in_axes=(0, None)))(x, labels[0])
    for i in range(3):
        for got, want in ((loss[i], f(x[i], labels[i])[0]), (dx[i], f(x[i], labels[i])[1]),
                          (shared[1][i], f(x[i], labels[0])[1])):
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_forward_mode(rng):
    x = make_logits(rng, (4, 21), F32)
    labels = make_labels(rng, (4,), 21).at[1].set(-100)
    where = jnp.asarray(rng.random((4, 21)) < 0.8)
    kw = dict(OPTIONS["all"], where=where)
    dx = jnp.asarray(rng.normal(size=x.shape), F32)
    got = jax.jvp(lambda x: jaxnorm.softmax_cross_entropy(x, labels, **kw), (x,), (dx,))
    want = jax.jvp(lambda x: reference.softmax_cross_entropy(x, labels, **kw), (to64(x),), (to64(dx),))
    for a, e in zip(got, want):
        np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-5)


def test_hessian(rng):
    """Second order through the backward's jnp form and the saved lse's tangent."""
    x = make_logits(rng, (2, 9), F32)
    labels = make_labels(rng, (2,), 9)
    kw = {"label_smoothing": 0.1, "z_loss": 0.05}
    got = jax.hessian(lambda x: jnp.sum(jaxnorm.softmax_cross_entropy(x, labels, **kw)))(x)
    want = jax.hessian(lambda x: jnp.sum(reference.softmax_cross_entropy(x, labels, **kw)))(to64(x))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


# ---- reduced losses: the forward and dlogits from one kernel ----


def magnitudes_reduced(x, labels, reduction, **kw):
    """The reduced loss's term magnitude (its rows' summed) and dlogits' (each row's weight as
    the cotangent), in float64."""
    ignore = kw.get("ignore_index")
    counted = np.ones(np.shape(labels), bool) if ignore is None else np.asarray(labels) != ignore
    w = np.ones(np.shape(labels)) if reduction == "sum" else np.full(np.shape(labels), 1.0 / max(counted.sum(), 1))
    mag_loss, mag_dx = magnitudes(x, labels, w, **kw)
    return float(np.sum(w * mag_loss)), mag_dx


@ALL_DTYPES
@pytest.mark.parametrize("reduction", ["sum", "mean"])
@pytest.mark.parametrize("option", list(OPTIONS))
@pytest.mark.parametrize("shape", [(6, 1), (5, 7), (3, 1000), (2, 3, 520), (3, 4099)], ids=str)
def test_reduced_matches_reference(dtype, reduction, option, shape, rng):
    """value_and_grad of the reduced loss (the fused forward-and-gradient kernel) against the
    float64 reference's."""
    kw = OPTIONS[option]
    x = make_logits(rng, shape, DTYPES[dtype])
    labels = make_labels(rng, shape[:-1], shape[-1])
    if "ignore_index" in kw:
        labels = labels.reshape(-1).at[0].set(-100).reshape(labels.shape)

    @jax.jit
    def run(x):
        def vg(fn, x):
            return jax.value_and_grad(lambda x: fn(x, labels, reduction=reduction, **kw))(x)

        return vg(jaxnorm.softmax_cross_entropy, x), vg(reference.softmax_cross_entropy, to64(x))

    (loss, dx), (loss_ref, dx_ref) = run(x)
    assert loss.dtype == F32 and loss.shape == () and dx.dtype == x.dtype
    mag_loss, mag_dx = magnitudes_reduced(x, labels, reduction, **kw)
    width = math.prod(x.shape)
    assert_close(loss, loss_ref, tol=tolerance(F32, width), mag=mag_loss, what="loss")
    assert_close(dx, dx_ref, tol=tolerance(x.dtype, shape[-1]), mag=mag_dx, what="dlogits")


@pytest.mark.wide(cpu=True)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("cols", [16384, 128256, 262144], ids=str)
def test_reduced_wide_rows(dtype, cols, rng):
    """Rows that the CUDA handler holds in one cluster (to 16 steps of its packs: 131072 float32
    or 262144 16-bit columns) and rows past that (its forward and backward kernels)."""
    x = make_logits(rng, (3, cols), DTYPES[dtype])
    labels = make_labels(rng, (3,), cols)
    kw = {"label_smoothing": 0.1, "z_loss": 1e-4}
    loss, dx = jax.jit(jax.value_and_grad(lambda x: jaxnorm.softmax_cross_entropy(x, labels, reduction="mean", **kw)))(x)
    loss_ref, dx_ref = jax.jit(jax.value_and_grad(
        lambda x: reference.softmax_cross_entropy(x, labels, reduction="mean", **kw)))(to64(x))
    mag_loss, mag_dx = magnitudes_reduced(x, labels, "mean", **kw)
    assert_close(loss, loss_ref, tol=tolerance(F32, x.size), mag=mag_loss, what="loss")
    assert_close(dx, dx_ref, tol=tolerance(x.dtype, cols), mag=mag_dx, what="dlogits")


@pytest.mark.wide
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("masked", [False, True], ids=["plain", "masked"])
def test_reduced_many_rows(dtype, masked, rng):
    """More rows than the CUDA handler's clusters hold at once: each cluster takes rows in turn,
    fetching its next two while it works on one (every row checked, and the last rows, which
    no cluster fetches past)."""
    rows, cols = 1999, 20000
    x = make_logits(rng, (rows, cols), DTYPES[dtype])
    labels = make_labels(rng, (rows,), cols)
    kw = {"where": jnp.asarray(rng.random((rows, cols)) < 0.9).at[:, 0].set(True)} if masked else {}
    f = lambda x, fn: fn(x, labels, reduction="sum", **kw)  # noqa: E731
    loss, dx = jax.jit(jax.value_and_grad(lambda x: f(x, jaxnorm.softmax_cross_entropy)))(x)
    loss_ref, dx_ref = jax.jit(jax.value_and_grad(lambda x: f(x, reference.softmax_cross_entropy)))(to64(x))
    mag_loss, mag_dx = magnitudes_reduced(x, labels, "sum", **kw)
    assert_close(loss, loss_ref, tol=tolerance(F32, x.size), mag=mag_loss, what="loss")
    assert_close(dx, dx_ref, tol=tolerance(x.dtype, cols), mag=mag_dx, what="dlogits")


@pytest.mark.parametrize("reduction", ["sum", "mean"])
def test_reduced_masks_and_special_rows(reduction, rng):
    """A class mask, a labels-shaped `where`, an ignored row, a row with nothing kept and an
    out-of-range label (NaN), reduced as the reference reduces them."""
    x = make_logits(rng, (6, 40), F32)
    labels = make_labels(rng, (6,), 40).at[1].set(-100)
    mask = jnp.asarray(rng.random((6, 40)) < 0.7).at[:, 0].set(True).at[2].set(False)
    row_where = jnp.array([True, True, True, False, True, True])
    for kw in ({"where": mask, "ignore_index": -100}, {"where": row_where, "ignore_index": -100, "label_smoothing": 0.1}):
        f = lambda x, fn=jaxnorm.softmax_cross_entropy: fn(x, labels, reduction=reduction, **kw)  # noqa: E731
        g = lambda x: reference.softmax_cross_entropy(x, labels, reduction=reduction, **kw)  # noqa: E731
        (loss, dx), (loss_ref, dx_ref) = jax.value_and_grad(f)(x), jax.value_and_grad(g)(to64(x))
        np.testing.assert_allclose(loss, loss_ref, rtol=1e-5)
        np.testing.assert_allclose(dx, dx_ref, rtol=1e-4, atol=1e-6)
    bad = labels.at[4].set(40)  # and row 1's -100, not ignored here
    loss, dx = jax.value_and_grad(lambda x: jaxnorm.softmax_cross_entropy(x, bad, reduction=reduction))(x)
    assert np.isnan(loss) and np.isnan(np.asarray(dx)[[1, 4]]).all() and np.isfinite(np.asarray(dx)[[0, 2, 3, 5]]).all()


def test_float16_reduced_losses_under_loss_scaling(rng):
    """float16 training scales the loss (2^15, 2^16: GradScaler's start) so that small gradients
    survive: the gradient is the reference's times the scale, rounded once to float16, neither
    flushed to 0 by a mean's 1 / rows nor overflowed by the scale."""
    x = make_logits(rng, (512, 300), F16)
    labels = make_labels(rng, (512,), 300)
    for reduction in ("mean", "sum"):
        ref = jax.grad(lambda x: reference.softmax_cross_entropy(x, labels, reduction=reduction))(to64(x))
        for s in (1.0, 2.0**15, 2.0**16):
            if reduction == "sum" and s > 1.0:
                continue  # a summed loss's gradients are O(1): scaling them by 2^15 overflows float16
            g = jax.grad(lambda x: jaxnorm.softmax_cross_entropy(x, labels, reduction=reduction) * s)(x)
            assert g.dtype == F16 and np.isfinite(np.asarray(g, np.float32)).all(), (reduction, s)
            want = np.asarray(ref, np.float64) * s
            err = np.abs(np.asarray(g, np.float64) - want)
            # float16's rounding of each entry: half an ulp, 2^-11 relative, or its subnormal step
            assert (err <= 2.0**-10 * np.abs(want) + 2.0**-24).all(), (reduction, s, err.max())


def test_reduced_bfloat16_gradient_applies_the_cotangent_in_float32(rng):
    """A loss scaled by 1/3 (an average over accumulation steps): the cotangent is applied in
    float32, not rounded to bfloat16 first, which scaled every entry by bf16(1/3) * 3 = 1.002."""
    x = make_logits(rng, (64, 200), BF16)
    labels = make_labels(rng, (64,), 200)
    exact = jax.grad(lambda x: reference.softmax_cross_entropy(x, labels, reduction="mean"))(to64(x))
    g = jax.grad(lambda x: jaxnorm.softmax_cross_entropy(x, labels, reduction="mean") / 3)(x)
    exact, g = np.asarray(exact, np.float64) / 3, np.asarray(g, np.float64)
    big = np.abs(exact) > 1e-3 * np.abs(exact).max()
    # bf16's rounding of each entry is unbiased: over 20 seeds the median ratio was 1 - 8e-6 ...
    # 1 + 2.3e-4 (with the cotangent rounded first: 1 + 1.8e-3 ... 1 + 2.0e-3)
    ratio = np.median(g[big] / exact[big])
    assert abs(ratio - 1) < 2.0**-10, ratio


def test_reduced_forward_mode_vmap_and_hessian(rng):
    x = make_logits(rng, (2, 5, 30), F32)
    labels = make_labels(rng, (2, 5), 30)
    f = lambda x: jaxnorm.softmax_cross_entropy(x, labels, reduction="mean", label_smoothing=0.1)  # noqa: E731
    g = lambda x: reference.softmax_cross_entropy(x, labels, reduction="mean", label_smoothing=0.1)  # noqa: E731
    t = make_logits(rng, x.shape, F32)
    # The tangent is a sum of 150 terms dloss/dx * t that cancel down to far less than their sizes,
    # so the float32 error is bounded against the sum of their magnitudes, not against the result.
    terms = jnp.abs(jax.grad(g)(to64(x)) * to64(t)).sum()
    jvp_ref = jax.jvp(g, (to64(x),), (to64(t),))[1]
    np.testing.assert_allclose(jax.jvp(f, (x,), (t,))[1], jvp_ref, rtol=1e-5, atol=1e-6 * float(terms))
    hv = jax.jvp(jax.grad(f), (x,), (t,))[1]
    np.testing.assert_allclose(hv, jax.jvp(jax.grad(g), (to64(x),), (to64(t),))[1], rtol=1e-4, atol=1e-7)
    per_example = jax.vmap(lambda x, y: jaxnorm.softmax_cross_entropy(x, y, reduction="sum"))(x, labels)
    np.testing.assert_allclose(per_example, jnp.sum(jaxnorm.softmax_cross_entropy(x, labels), axis=1), rtol=1e-6)
    gv = jax.vmap(jax.grad(lambda x, y: jaxnorm.softmax_cross_entropy(x, y, reduction="mean")))(x, labels)
    gr = jax.vmap(jax.grad(lambda x, y: reference.softmax_cross_entropy(x, y, reduction="mean")))(to64(x), labels)
    np.testing.assert_allclose(gv, gr, rtol=1e-4, atol=1e-7)


def test_reduced_step_writes_dlogits_in_the_forward(rng):
    """The compiled value_and_grad of a reduced loss is one custom call that writes dlogits (the
    fused target), no backward kernel and no elementwise pass over [rows, vocab] after it: the
    cotangent's multiply by 1 is folded. Scaled by another constant, one multiply remains."""
    x = make_logits(rng, (8, 512), BF16)
    labels = make_labels(rng, (8,), 512)
    loss = lambda x: jaxnorm.softmax_cross_entropy(x, labels, reduction="mean", z_loss=1e-4)  # noqa: E731
    text = jax.jit(jax.value_and_grad(lambda x: loss(x) + 0.5)).lower(x).compile().as_text()
    assert "jaxnorm_cross_entropy_fwd_grad" in text and "jaxnorm_cross_entropy_bwd" not in text
    assert "jaxnorm_cross_entropy_fwd_v2" not in text
    assert not re.search(r"= bf16\[8,512\][^\n]*(multiply|fusion)\(", text), text
    scaled = jax.jit(jax.grad(lambda x: 3.0 * loss(x))).lower(x).compile().as_text()
    assert re.search(r"= bf16\[8,512\][^\n]*fusion\(", scaled)


def test_reduced_primal_takes_the_forward_alone(rng):
    x = make_logits(rng, (4, 64), F32)
    labels = make_labels(rng, (4,), 64)
    text = jax.jit(lambda x: jaxnorm.softmax_cross_entropy(x, labels, reduction="sum")).lower(x).compile().as_text()
    assert "jaxnorm_cross_entropy_fwd_v2" in text and "fwd_grad" not in text


def test_reduced_empty_batch_and_nothing_counted():
    x, y = jnp.zeros((0, 7), F32), jnp.zeros((0,), jnp.int32)
    assert float(jaxnorm.softmax_cross_entropy(x, y, reduction="sum")) == 0.0
    assert np.isnan(jaxnorm.softmax_cross_entropy(x, y, reduction="mean"))
    x, y = jnp.ones((3, 7), F32), jnp.full((3,), -100, jnp.int32)
    loss, dx = jax.value_and_grad(lambda x: jaxnorm.softmax_cross_entropy(x, y, reduction="mean", ignore_index=-100))(x)
    assert np.isnan(loss) and not np.asarray(dx).any()


def test_hlo_holds_the_custom_calls(rng):
    x = make_logits(rng, (4, 64), BF16)
    labels = make_labels(rng, (4,), 64)
    grad = jax.jit(jax.grad(lambda x: jnp.sum(jaxnorm.softmax_cross_entropy(x, labels))))
    text = grad.lower(x).compile().as_text()
    assert "jaxnorm_cross_entropy_fwd_v2" in text and "jaxnorm_cross_entropy_bwd" in text


@pytest.mark.parametrize("cols", [3000, 40000], ids=str)
def test_deterministic(cols, rng):
    x = make_logits(rng, (64, cols), BF16)
    labels = make_labels(rng, (64,), cols)
    f = jax.jit(jax.value_and_grad(lambda x: jnp.sum(jaxnorm.softmax_cross_entropy(x, labels, label_smoothing=0.1))))
    (a, da), (b, db) = f(x), f(x + 0)
    assert np.asarray(a).tobytes() == np.asarray(b).tobytes()
    assert np.asarray(da).tobytes() == np.asarray(db).tobytes()


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_no_rows_by_vocab_float32_buffer(dtype):
    """The compiled training step holds the logits and dlogits and no other [rows, vocab] array:
    no probabilities, no float32 copy of bfloat16 logits (optax's XLA form holds several)."""
    rows, vocab = 32, 4096
    dt = DTYPES[dtype]
    x = jnp.zeros((rows, vocab), dt)
    labels = jnp.zeros((rows,), jnp.int32)
    step = jax.jit(jax.value_and_grad(lambda x: jnp.mean(jaxnorm.softmax_cross_entropy(x, labels, label_smoothing=0.1))))
    compiled = step.lower(x).compile()
    shapes = re.findall(r"\b(f32|bf16|f16)\[%d,%d\]" % (rows, vocab), compiled.as_text())
    if dt == BF16:
        assert "f32" not in shapes, shapes
    mem = compiled.memory_analysis()
    if mem is not None:  # logits and dlogits are the argument and the output, not temporaries
        assert mem.temp_size_in_bytes < rows * vocab * np.dtype(dt).itemsize, mem


# ---- bad input ----


@pytest.mark.parametrize(
    "kwargs,error,match",
    [
        ({"labels": np.zeros(4, np.float32)}, TypeError, "labels.*integer"),
        ({"labels": np.zeros(5, np.int32)}, ValueError, r"labels.*\(4,\)"),
        ({"labels": np.zeros((4, 1), np.int32)}, ValueError, "labels"),
        ({"logits": np.zeros((4, 10), np.int32)}, TypeError, "logits"),
        ({"logits": np.zeros((4, 10), np.float64)}, TypeError, "logits"),
        ({"axis": 2}, ValueError, "axis 2 is out of range"),
        ({"axis": (1, 1)}, ValueError, "repeats"),
        ({"label_smoothing": 1.0}, ValueError, r"label_smoothing.*\[0, 1\)"),
        ({"label_smoothing": -0.1}, ValueError, "label_smoothing"),
        ({"label_smoothing": jnp.float32(0.1)}, TypeError, "label_smoothing"),
        ({"z_loss": -1e-4}, ValueError, "z_loss"),
        ({"z_loss": float("inf")}, ValueError, "z_loss"),
        ({"ignore_index": 1.5}, TypeError, "ignore_index"),
        ({"ignore_index": 2**40}, ValueError, "ignore_index"),
        ({"where": np.ones((4, 3), bool)}, ValueError, "where"),
        ({"where": np.ones((4, 10), np.float32)}, TypeError, "where"),
        ({"logits": np.zeros((4, 0), np.float32)}, ValueError, "empty"),
        ({"reduction": "max"}, ValueError, "reduction.*'max'"),
        ({"reduction": True}, ValueError, "reduction"),
    ],
)
def test_bad_inputs(kwargs, error, match):
    args = {"logits": np.zeros((4, 10), np.float32), "labels": np.zeros(4, np.int32), **kwargs}
    with pytest.raises(error, match=match):
        jaxnorm.softmax_cross_entropy(args.pop("logits"), args.pop("labels"), **args)


def test_empty_batch():
    loss = jaxnorm.softmax_cross_entropy(jnp.zeros((0, 7), F32), jnp.zeros((0,), jnp.int32))
    assert loss.shape == (0,) and loss.dtype == F32


@pytest.mark.parametrize("cols", [1000, 20000], ids=str)
def test_first_forward_target(cols, rng):
    """The superseded jaxnorm_cross_entropy_fwd (kept for artifacts before FFI version 4) computes
    the same loss and saved statistics as its successor (on the GPU its rows are never split)."""
    from jaxnorm import _ops

    x = make_logits(rng, (5, cols), BF16)
    labels = make_labels(rng, (5,), cols)
    kw = dict(label_smoothing=0.1, z_loss=1e-4, ignore_index=-100, has_mask=False)
    mask = jnp.zeros((0,), jnp.bool_)
    loss1, stats1 = _ops.cross_entropy_fwd_v1_p.bind(x, labels, mask, **kw)
    loss2, stats2 = _ops.cross_entropy_fwd_p.bind(x, labels, mask, **kw)
    np.testing.assert_allclose(np.asarray(loss1), np.asarray(loss2), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(stats1), np.asarray(stats2), rtol=1e-5)
