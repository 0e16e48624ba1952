"""Softmax cross-entropy with integer labels, fused: the loss from one read of the logits, the
gradient from one more, no probabilities in memory.

``optax.softmax_cross_entropy_with_integer_labels`` materializes nothing either in principle, but
XLA runs it as a max, an exp-sum and a gather over the logits, and its gradient as a softmax
written out and combined with the one-hot; here the forward is one kernel (the softmax family's
online (max, sum) row reduction, which also sums the logits for label smoothing) that writes the
per-row loss and saves the row's log-sum-exp, and the backward is one elementwise kernel writing
``dlogits = g * (softmax(x) - onehot)`` (with the options' terms) in the logits' dtype.
"""

from __future__ import annotations

import math
from functools import partial

import numpy as np

import jax
import jax.numpy as jnp
from jax.interpreters import ad

from jaxnorm import _checks
from jaxnorm._ops import cross_entropy_bwd_p, cross_entropy_fwd_grad_p, cross_entropy_fwd_p
from jaxnorm._primitive import define_jvp_by_formula, empty_placeholder, formula_primitive
from jaxnorm._partition import as_rows
from jaxnorm._vma import vary_together

F32 = jnp.float32
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
# The kernels' ignore_index when nothing is ignored: no int32 label equals it.
NO_IGNORE = -(2**63)


def softmax_cross_entropy(logits, labels, *, axis=-1, where=None, label_smoothing=0.0, z_loss=0.0,
                          ignore_index=None, reduction=None):
    """Per-example softmax cross-entropy with integer labels, a drop-in for
    ``optax.softmax_cross_entropy_with_integer_labels`` with PyTorch's options, as two kernels.

    Equivalent to (``jaxnorm.reference.softmax_cross_entropy``), per row with the kept classes K
    (all, or those ``where`` keeps), n = |K|, eps = ``label_smoothing``::

        lse = logsumexp(logits[K])
        loss = (1 - eps) * (lse - logits[label]) + eps * (lse - mean(logits[K])) + z_loss * lse**2

    i.e. the cross-entropy against the target ``(1 - eps) * onehot(label) + eps / n`` over K
    (PyTorch's ``label_smoothing``, QuACK's and Liger's convention), plus PaLM's z-loss.

    Args:
      logits: float32, bfloat16 or float16 array of any shape.
      labels: integer array (any integer dtype, used as int32) of ``logits``' shape without the
        class axes: the class index of each example. With several class axes, the index into
        their flattening in the order given (as optax).
      axis: int or tuple of ints, the class axes. Trailing axes cost nothing; other axes are
        moved to the end (a transpose).
      where: optional boolean mask. Of the labels' shape (optax's per-example form): examples
        where it is False give loss 0 and no gradient. Otherwise it broadcasts against
        ``logits`` (``jax.nn``'s form) and excludes classes from the softmax and the smoothing
        mean; the label's own logit counts whether kept or not (as in optax). A row with no class
        kept gives loss 0 and no gradient (optax's ``jnp.where(jnp.any(where, axis), out, 0)``).
      label_smoothing: Python float in [0, 1).
      z_loss: Python float >= 0, the weight of ``lse**2`` (PaLM uses 1e-4).
      ignore_index: None or a Python int: examples whose label equals it give loss 0 and no
        gradient (PyTorch's ``ignore_index``, e.g. -100).
      reduction: None (the loss of each example), ``"sum"``, or ``"mean"``: the sum over the
        examples divided by the number that count, those neither ignored nor dropped by a
        labels-shaped ``where`` (PyTorch's ``reduction="mean"``; none counting gives NaN). A
        reduced loss is differentiated in one read of the logits: under ``jax.grad`` its forward
        writes dlogits for a unit cotangent beside the loss, and the backward scales them by the
        cotangent, a multiply that XLA removes when the cotangent is the constant 1 (the loss
        itself differentiated, as in ``jax.value_and_grad(loss_fn)`` with ``loss_fn`` returning
        it, or a sum with other terms). Otherwise the multiply is one more pass over dlogits.
        float16 logits take the per-row losses' forward and backward instead: float16 cannot hold
        dlogits pre-scaled by a mean's 1 / rows, nor a loss-scaled cotangent (2^16).

    Returns:
      The loss of each example, float32, of the labels' shape (float32 whatever the logits'
      dtype: a bfloat16 loss would lose the digits a mean over the batch sums; optax returns the
      logits' dtype), or with ``reduction`` a float32 scalar.

    Labels outside ``[0, num_classes)`` (other than ``ignore_index``) give a NaN loss and a NaN
    gradient row, like a checked gather: values are unknown at trace time, and a NaN cannot go
    unnoticed. optax wraps negative labels numpy-style (-1 is the last class) and gives NaN past
    the end; here every negative label is NaN, since it is nearly always a padding sentinel.

    Logits: ``-inf`` entries drop out of the softmax (and make the smoothing mean, and so the loss
    with smoothing, ``+inf``, as the formula says); a ``+inf`` logit gives ``lse = +inf`` (as
    ``jax.nn.logsumexp``), a NaN logit a NaN loss.

    Gradients: reverse and forward mode in ``logits`` (none in labels or where); the backward
    reads the logits and the saved per-row (lse, n) and writes ``dlogits`` in the logits' dtype:
    ``g * ([j in K] p_j (1 + 2 z_loss lse) - (1 - eps) [j = label] - eps [j in K] / n)``.
    """
    fn = "softmax_cross_entropy"
    logits = _checks.as_array(logits, fn, "logits")
    _checks.check_input_dtype(logits, fn, "logits")
    labels = _checks.as_array(labels, fn, "labels")
    if not jnp.issubdtype(labels.dtype, jnp.integer):
        raise TypeError(f"{fn}: `labels` must be an integer array, got {np.dtype(labels.dtype)} with shape "
                        f"{tuple(labels.shape)}")
    if logits.ndim == 0:
        raise ValueError(f"{fn}: `logits` must have a class axis, got a scalar")
    axes = _checks.canonical_axes(logits.ndim, axis, fn)
    # Labels index the class axes' flattening in the order given, as optax's.
    class_axes = [a % logits.ndim for a in (axis if isinstance(axis, (tuple, list)) else (axis,))]
    batch_axes = [i for i in range(logits.ndim) if i not in axes]
    batch_shape = tuple(logits.shape[i] for i in batch_axes)
    if tuple(labels.shape) != batch_shape:
        raise ValueError(f"{fn}: `labels` must have logits' shape without the class axes, {batch_shape} "
                         f"(logits {tuple(logits.shape)}, axis {axis!r}), got {tuple(labels.shape)}")
    cols = math.prod(logits.shape[a] for a in axes)
    if cols == 0:
        raise ValueError(f"{fn}: the class axes of logits {tuple(logits.shape)} (axis {axis!r}) are empty")
    params = dict(label_smoothing=_smoothing(label_smoothing, fn), z_loss=_z_loss(z_loss, fn),
                  ignore_index=_ignore(ignore_index, fn))
    reduction = _reduction(reduction, fn)
    row_keep, mask = _split_where(where, logits, batch_shape, fn)
    if math.prod(batch_shape) == 0:
        if reduction is None:
            return jnp.zeros(batch_shape, F32)
        return jnp.array(0.0 if reduction == "sum" else jnp.nan, F32)

    perm = batch_axes + class_axes
    if perm != list(range(logits.ndim)):
        logits = jnp.transpose(logits, perm)
        mask = None if mask is None else jnp.transpose(mask, perm)
    x = as_rows(logits, len(axes))
    mask = None if mask is None else as_rows(mask, len(axes))
    lab, params["ignore_index"] = _labels32(as_rows(labels, 0), row_keep, params["ignore_index"])
    x, lab, mask = vary_together(x, lab, mask)
    params = dict(params, has_mask=mask is not None)
    if reduction is not None:
        weight = _weights(lab, reduction, params)
        if x.dtype == jnp.float16:
            # float16 holds neither dlogits pre-scaled by the mean's 1 / rows (they underflow) nor a
            # loss-scaled cotangent (2^16 overflows it): the per-row losses, whose backward applies
            # each row's float32 cotangent as it writes dlogits.
            return jnp.sum(_core(x, lab, mask, params) * weight)
        return _reduced(x, lab, mask, weight, tuple(sorted(params.items())))
    loss = _core(x, lab, mask, params)
    return loss.reshape(batch_shape)


# ---- argument checks ----


def _python_float(v, fn, name):
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise TypeError(f"{fn}: `{name}` must be a Python float (static), got {type(v).__name__}")
    return float(v)


def _smoothing(v, fn):
    v = _python_float(v, fn, "label_smoothing")
    if not 0.0 <= v < 1.0:
        raise ValueError(f"{fn}: `label_smoothing` must be in [0, 1), got {v}")
    return v


def _z_loss(v, fn):
    v = _python_float(v, fn, "z_loss")
    if not 0.0 <= v < math.inf:
        raise ValueError(f"{fn}: `z_loss` must be finite and >= 0, got {v}")
    return v


def _ignore(v, fn):
    if v is None:
        return NO_IGNORE
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
        raise TypeError(f"{fn}: `ignore_index` must be None or a Python int, got {type(v).__name__}")
    if not INT32_MIN <= int(v) <= INT32_MAX:
        raise ValueError(f"{fn}: `ignore_index` must fit in int32, got {v}")
    return int(v)


def _reduction(v, fn):
    if v is None or (isinstance(v, str) and v in ("sum", "mean")):
        return v
    raise ValueError(f"{fn}: `reduction` must be None, 'sum' or 'mean', got {v!r}")


def _split_where(where, logits, batch_shape, fn):
    """(per-row keep, per-class mask): optax's labels-shaped form, or jax.nn's broadcast form."""
    if where is None:
        return None, None
    w = _checks.as_array(where, fn, "where")
    if w.ndim < logits.ndim and tuple(w.shape) == batch_shape:
        if not (jnp.issubdtype(w.dtype, jnp.bool_) or jnp.issubdtype(w.dtype, jnp.integer)):
            raise TypeError(f"{fn}: `where` must be a boolean mask, got {np.dtype(w.dtype)}")
        return w.astype(jnp.bool_).reshape(-1), None
    return None, _checks.check_where(w, logits, fn, "logits")


def _labels32(labels, row_keep, ignore):
    """The labels as int32 (wider values clamped: still out of range) and the kernels' ignore
    index. Rows dropped by a per-row `where` take the ignore index (INT32_MIN when the caller
    ignores none; a label of INT32_MIN then moves to INT32_MIN + 1, out of range all the same)."""
    labels = _checks.int32_clamped(labels, INT32_MIN, INT32_MAX)
    if row_keep is None:
        return labels, ignore
    if ignore == NO_IGNORE:
        ignore = INT32_MIN
        labels = jnp.maximum(labels, INT32_MIN + 1)
    return jnp.where(row_keep, labels, jnp.int32(ignore)), ignore


def _mask_operand(mask):
    return empty_placeholder(jnp.bool_) if mask is None else mask


def _core(x, labels, mask, params):
    return cross_entropy_fwd_p.bind(x, labels, _mask_operand(mask), **params)[0]


def _weights(labels, reduction, params):
    """Each row's weight in the reduced loss: 1 for "sum"; for "mean" 1 / the rows that count
    (labels not ignore_index, which a labels-shaped `where` has put on the rows it drops)."""
    rows = labels.shape[0]
    if reduction == "sum":
        return jnp.ones((rows,), F32)
    ignore = params["ignore_index"]
    counted = jnp.sum(labels != ignore) if INT32_MIN <= ignore <= INT32_MAX else rows
    return jnp.full((rows,), 1.0, F32) / jnp.asarray(counted, F32)


# ---- the reduced losses ----
# sum_rows(weight * loss). Evaluated alone: the forward kernel's losses, weighted and summed. Its
# JVP takes the fused kernel (cross_entropy_fwd_grad_p: the loss and d = weight * d loss / d
# logits in one read) and a tangent map dx -> sum(d * dx), whose transpose is ct * d: no kernel,
# and for ct the constant 1 (the reduced loss itself differentiated) nothing once XLA folds the
# multiply.


@partial(jax.custom_jvp, nondiff_argnums=(4,))
def _reduced(x, labels, mask, weight, params):
    return jnp.sum(_core(x, labels, mask, dict(params)) * weight)


@_reduced.defjvp
def _reduced_jvp(params, primals, tangents):
    x, labels, mask, weight = primals
    loss, d = cross_entropy_fwd_grad_p.bind(x, labels, _mask_operand(mask), weight, **dict(params))
    (t,) = _weighted_tangent_p.bind(d, tangents[0])
    return jnp.sum(loss * weight), jnp.sum(t)


def _weighted_tangent_formula(d, dx):
    return [jnp.sum(d.astype(F32) * dx.astype(F32), axis=1)]


_weighted_tangent_p = formula_primitive("jaxnorm_cross_entropy_weighted_tangent", _weighted_tangent_formula,
                                        ("R,C", "R,C"))


def _weighted_tangent_transpose(cts, d, dx):
    (ct,) = cts
    if type(ct) is ad.Zero:
        return [None, None]
    # In float32: a 16-bit copy of a cotangent such as 1/3 would bias every entry alike.
    return [None, (d.astype(F32) * ct[:, None].astype(F32)).astype(dx.aval.dtype)]


_weighted_tangent_p.def_transpose(_weighted_tangent_transpose)


def _fwd_grad_formula(x, labels, mask, weight, **params):
    """The fused kernel's outputs by the forward and backward kernels, whose JVPs give its own
    (second-order derivatives of the reduced losses)."""
    loss, stats = cross_entropy_fwd_p.bind(x, labels, mask, **params)
    return [loss, cross_entropy_bwd_p.bind(x, labels, stats, weight, mask, **params)[0]]


define_jvp_by_formula(cross_entropy_fwd_grad_p, _fwd_grad_formula)


# ---- derivatives ----
# As for softmax (jaxnorm/softmax.py): the forward kernel's JVP is a tangent map, linear in dx,
# whose transpose is the backward kernel; it keeps the logits and the per-row (lse, n).


def _coefficients(x, labels, stats, mask, *, label_smoothing, z_loss, ignore_index, has_mask):
    """d loss / d x for a unit cotangent, and p (the softmax over the kept classes), in float32:
    the backward kernel's arithmetic (common/cross_entropy_math.h) in jnp."""
    cols = x.shape[1]
    lse, n = stats[:, :1], stats[:, 1:]
    keep = mask if has_mask else jnp.ones((), jnp.bool_)
    p = jnp.where(keep, jnp.exp(x.astype(F32) - lse), 0.0)
    coef = p * (1 + 2 * z_loss * lse) if z_loss else p
    if label_smoothing:
        coef = coef - jnp.where(keep, label_smoothing / n, 0.0)
    lab = labels[:, None]
    coef = coef - jnp.where(jnp.arange(cols, dtype=jnp.int32)[None, :] == lab, 1.0 - label_smoothing, 0.0)
    off = (n == 0) if has_mask else jnp.zeros((), jnp.bool_)
    if INT32_MIN <= ignore_index <= INT32_MAX:
        off = off | (lab == ignore_index)
    ok = (lab >= 0) & (lab < cols)
    return jnp.where(off, 0.0, jnp.where(ok, coef, jnp.nan)), p


def _bwd_formula(x, labels, stats, dloss, mask, **params):
    coef, _ = _coefficients(x, labels, stats, mask, **params)
    return [(dloss[:, None] * coef).astype(x.dtype)]


def _tangent_formula(x, labels, stats, mask, dx, **params):
    """(dloss, dstats): the loss's tangent and lse's (the saved lse is differentiated too, for
    second order; n has none)."""
    coef, p = _coefficients(x, labels, stats, mask, **params)
    dxf = dx.astype(F32)
    dlse = jnp.sum(p * dxf, axis=1)
    return [jnp.sum(coef * dxf, axis=1), jnp.stack([dlse, jnp.zeros_like(dlse)], axis=1)]


cross_entropy_tangent_p = formula_primitive(
    "jaxnorm_cross_entropy_tangent", _tangent_formula, ("R,C", "R", "R,2", "R,C?", "R,C"))


def _tangent_transpose(cts, x, labels, stats, mask, dx, **params):
    ct_loss, ct_stats = cts
    gx = None
    if type(ct_loss) is not ad.Zero:
        (gx,) = cross_entropy_bwd_p.bind(x, labels, stats, ct_loss.astype(F32), mask, **params)
    if type(ct_stats) is not ad.Zero:  # only in higher-order derivatives
        _, p = _coefficients(x, labels, stats, mask, **params)
        extra = p * ct_stats[:, :1].astype(F32)
        gx = extra if gx is None else gx.astype(F32) + extra
    return [None, None, None, None, None if gx is None else gx.astype(dx.aval.dtype)]


def _fwd_jvp(primals, tangents, **params):
    x, labels, mask = primals
    loss, stats = cross_entropy_fwd_p.bind(x, labels, mask, **params)
    dloss, dstats = cross_entropy_tangent_p.bind(x, labels, stats, mask, ad.instantiate_zeros(tangents[0]), **params)
    return (loss, stats), (dloss, dstats)


ad.primitive_jvps[cross_entropy_fwd_p] = _fwd_jvp
cross_entropy_tangent_p.def_transpose(_tangent_transpose)
define_jvp_by_formula(cross_entropy_bwd_p, _bwd_formula)
