"""The shared test base: every jaxnorm op described once, and the checks all of them go through.

An `Op` names the jaxnorm function, its specification in `jaxnorm.reference`, and the parameters
it is differentiable in besides `x`. The parametrized modules (test_ops.py, test_transforms.py,
test_properties.py) run every op in `OPS` through the same checks; op-specific behaviour lives in
test_norm.py and test_softmax.py.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable

import numpy as np
import pytest

import jax
import jax.numpy as jnp

import jaxnorm
from jaxnorm import reference

F32 = np.dtype(np.float32)
BF16 = np.dtype(jnp.bfloat16)
F16 = np.dtype(np.float16)
F64 = np.dtype(np.float64)
DTYPES = {"float32": F32, "bfloat16": BF16, "float16": F16, "float64": F64}

# Unit roundoff u of each dtype: a correctly rounded result lies within u (relative) of the
# exact value. bfloat16 keeps 8 significant bits, float16 11, float32 24.
UNIT_ROUNDOFF = {F32: 2.0**-24, BF16: 2.0**-8, F16: 2.0**-11, F64: 2.0**-53}


@dataclasses.dataclass(frozen=True)
class Op:
    name: str
    fn: Callable  # the jaxnorm function
    ref: Callable  # its specification, evaluated in float64 by the tests
    params: tuple[str, ...]  # differentiable parameters after x, in positional order
    is_norm: bool

    def __str__(self):
        return self.name


LAYER_NORM = Op("layer_norm", jaxnorm.layer_norm, reference.layer_norm, ("scale", "bias"), True)
RMS_NORM = Op("rms_norm", jaxnorm.rms_norm, reference.rms_norm, ("scale",), True)
SOFTMAX = Op("softmax", jaxnorm.softmax, reference.softmax, (), False)
LOG_SOFTMAX = Op("log_softmax", jaxnorm.log_softmax, reference.log_softmax, (), False)
OPS = (LAYER_NORM, RMS_NORM, SOFTMAX, LOG_SOFTMAX)
NORMS = (LAYER_NORM, RMS_NORM)
SOFTMAXES = (SOFTMAX, LOG_SOFTMAX)


# ----------------------------------------------------------------------------------------------
# Data


def make_x(op: Op, rng: np.random.Generator, shape, dtype) -> jax.Array:
    """Random input of `op`'s typical range, never all zeros.

    Norm rows get a random offset and spread so centering and scaling both matter; logits a
    spread of a few units so softmax rows are neither uniform nor one-hot.
    """
    if op.is_norm:
        a = rng.normal(loc=rng.uniform(-2, 2), scale=rng.uniform(0.5, 2), size=shape)
    else:
        a = 3.0 * rng.normal(size=shape)
    return jnp.asarray(a, dtype)


def make_params(op: Op, rng, norm_shape, dtype, names=None, *, bounded_scale=False) -> tuple:
    """`op`'s scale/bias (those in `names`, default all), shaped like the normalized axes.

    With bounded_scale the scale magnitude lies in [0.5, 1.5] (random sign): memory-efficient
    backward divides by the scale, so a scale near zero would amplify y's rounding without bound.
    """
    names = op.params if names is None else names
    out = []
    for name in op.params:
        if name not in names:
            out.append(None)
        elif name == "scale" and bounded_scale:
            mag = rng.uniform(0.5, 1.5, size=norm_shape)
            out.append(jnp.asarray(mag * rng.choice([-1.0, 1.0], size=norm_shape), dtype))
        else:
            out.append(jnp.asarray(rng.normal(size=norm_shape), dtype))
    return tuple(out)


def make_cotangent(rng, like) -> jax.Array:
    return jnp.asarray(rng.normal(size=like.shape), like.dtype)


def to64(a):
    return None if a is None else jnp.asarray(a).astype(F64)


def as_f64(a) -> np.ndarray:
    return np.asarray(a).astype(np.float64)


# ----------------------------------------------------------------------------------------------
# Running an op


def fwd_vjp(fn, x, params, ct, **kw):
    """fn's output and its vjp in x and every present (not None) parameter."""
    present = [i for i, p in enumerate(params) if p is not None]

    def f(x, *ps):
        full = list(params)
        for i, p in zip(present, ps):
            full[i] = p
        return fn(x, *full, **kw)

    y, pullback = jax.vjp(f, x, *(params[i] for i in present))
    grads = pullback(ct)
    full_grads = [None] * len(params)
    for i, g in zip(present, grads[1:]):
        full_grads[i] = g
    return y, (grads[0], *full_grads)


def run_both(op: Op, x, params=(), ct=None, *, rng=None, **kw):
    """(actual, expected): jaxnorm's (y, grads) and the reference's on the same values in
    float64, from one jitted function (one compilation per case)."""
    if ct is None:
        ct = make_cotangent(rng, x)
    ref_kw = {k: v for k, v in kw.items() if k != "memory_efficient"}  # a backward choice only

    @jax.jit
    def run(x, params, ct):
        actual = fwd_vjp(op.fn, x, params, ct, **kw)
        expected = fwd_vjp(op.ref, to64(x), tuple(to64(p) for p in params), to64(ct), **ref_kw)
        return actual, expected

    return run(x, tuple(params), ct)


# ----------------------------------------------------------------------------------------------
# Tolerances
#
# An error is judged against the magnitude of the terms a result is computed from, not against
# the result alone: a - b carries rounding of order u * (|a| + |b|) however small a - b is. So a
# layer_norm row with a large mean relative to its spread, a width-1 rms_norm gradient
# (rstd * g * (1 - x_hat^2)), or a softmax gradient y * (dy - sum(dy * y)) of a peaked row are
# checked at the accuracy float arithmetic can give them, and every other element at the
# accuracy of its own magnitude.


@dataclasses.dataclass(frozen=True)
class Tol:
    rel: float  # times |expected|: rounding the result to its dtype
    terms: float  # times the term magnitude: float32 arithmetic and inputs read rounded


def tolerance(dtype, width: int, rounded_input=None) -> Tol:
    """The tolerance of a result of `dtype` from rows of `width` elements.

    rel: rounding the result to its dtype costs u of its own magnitude; 2u, since a float32
    value within float32 error of a rounding boundary may round either way.

    terms: the kernels compute in float32 from inputs that are exact in float32, except that a
    backward may read a rounded forward output (softmax's y; y in memory-efficient norms), which
    carries u of `rounded_input`'s dtype on every term. Float32 arithmetic: a row sum of
    `width` terms has independent rounding errors adding up to about 0.6 sqrt(width) u (rms)
    for a plain running sum, 2 sqrt(width) u at three sigma, and less for blocked, tree or wider
    accumulation; the constant covers rsqrt/exp/log and divisions (a few ulp each, fast-math GPU
    versions included) along the chain mean -> variance -> rstd -> x_hat -> y and a backward's
    two dependent reductions. An error growing like width itself (a running sum absorbing terms
    below half its ulp) fails.
    """
    u_out = UNIT_ROUNDOFF[np.dtype(dtype)]
    u_in = 0.0 if rounded_input is None else UNIT_ROUNDOFF[np.dtype(rounded_input)]
    return Tol(rel=2 * u_out, terms=2 * u_in + 2.0**-24 * (32 + 2 * math.sqrt(width)))


def result_tolerance(op: Op, name: str, dtype, x_dtype, width: int, memory_efficient=False) -> Tol:
    """tolerance() for `op`'s result `name` ("y" or a gradient's input name)."""
    reads_output = name != "y" and (memory_efficient or not op.is_norm)
    return tolerance(dtype, width, x_dtype if reads_output else None)


def _np(a):
    return None if a is None else as_f64(a)


def term_magnitudes(op: Op, x, params, ct, y_ref, *, axis=-1, where=None, epsilon=1e-6,
                    memory_efficient=False) -> dict:
    """For each result ("y", "x", "scale", "bias"), elementwise: the magnitude of the terms it is
    computed from, evaluated in float64 on the test's own values."""
    dtype = x.dtype
    x, ct, y_ref = _np(x), _np(ct), _np(y_ref)
    if op.is_norm:
        k = 1 if isinstance(axis, int) else len(axis)
        norm_shape = x.shape[x.ndim - k :]
        cols = math.prod(norm_shape)
        x2, ct2 = x.reshape(-1, cols), ct.reshape(-1, cols)
        ps = [None if p is None else _np(p).reshape(-1) for p in params]
        s = ps[0] if ps[0] is not None else np.ones(cols)
        b = ps[1] if len(ps) > 1 and ps[1] is not None else np.zeros(cols)
        if op.name == "layer_norm":
            mean = x2.mean(1, keepdims=True)
            rstd = 1 / np.sqrt(((x2 - mean) ** 2).mean(1, keepdims=True) + epsilon)
            # x - mean: both terms count, and the mean's own terms are the row's |x|: a float
            # mean is off by a few units of mean(|x|), not of |mean| (a row of spread 1.6 and
            # mean 8e-4 failed on its element nearest the mean: GPU 1.02x, CPU 26x).
            xhat = (np.abs(x2) + np.abs(x2).mean(1, keepdims=True)) * rstd
        else:
            rstd = 1 / np.sqrt((x2**2).mean(1, keepdims=True) + epsilon)
            xhat = np.abs(x2) * rstd
        y_mag = xhat * np.abs(s) + np.abs(b)
        if memory_efficient:
            # x_hat is recovered as (y - bias) / scale from the rounded y.
            xhat = xhat + y_mag / np.maximum(np.abs(s), epsilon)
        g = np.abs(ct2 * s)
        c1 = g.mean(1, keepdims=True)  # mean(g)
        c2 = (g * xhat).mean(1, keepdims=True)  # mean(g * x_hat)
        return {
            "y": y_mag.reshape(x.shape),
            "x": (rstd * (g + c1 + xhat * c2)).reshape(x.shape),
            "scale": (np.abs(ct2) * xhat).sum(0).reshape(norm_shape),
            "bias": np.abs(ct2).sum(0).reshape(norm_shape),
        }
    axes = tuple(range(x.ndim)) if axis is None else ((axis,) if isinstance(axis, int) else tuple(axis))
    keep = np.ones(x.shape, bool) if where is None else np.broadcast_to(np.asarray(where, bool), x.shape)
    live = keep & np.isfinite(y_ref)  # not masked, not an exp(-inf) = 0 or log(0) = -inf entry
    dy = np.where(keep, np.abs(ct), 0.0)
    with np.errstate(invalid="ignore", over="ignore"):
        if op.name == "softmax":
            p = np.where(live, np.abs(y_ref), 0.0)
            # The backward reads y rounded to x's dtype: below the smallest normal number that
            # rounding is u * tiny, not u * |y|.
            p_read = np.where(live, np.maximum(p, float(jnp.finfo(dtype).tiny)), 0.0)
            m = np.max(np.where(keep, x, -np.inf), axis=axes, keepdims=True)
            # exp(x - m): the subtraction's rounding u * |x - m| is a relative error of the exp.
            y_terms = np.where(p > 0, p * (1 + np.abs(x - m)), 0.0)
            dx_terms = p_read * (dy + np.sum(p_read * dy, axis=axes, keepdims=True))  # y (dy - sum(dy y))
        else:
            ay = np.where(live, np.abs(y_ref), 0.0)
            p = np.exp(-ay) * live
            # (x - m) - log(d): two terms of one sign, and log turns d's relative error into an
            # absolute one.
            y_terms = ay + live
            # dx = dy - exp(y) * sum(dy), with exp of a y that carries a rounding of u * |y|.
            dx_terms = dy + p * (1 + ay) * np.sum(dy, axis=axes, keepdims=True)
    return {"y": y_terms, "x": dx_terms}


def assert_close(actual, expected, *, tol: Tol, mag=0.0, what: str = ""):
    """|actual - expected| <= tol.rel |expected| + tol.terms mag + one subnormal step of actual's
    dtype, elementwise (`mag` an array or a number), with NaNs and infinities in the same places.

    Below the smallest normal number rounding is absolute, not relative: a float16 softmax
    output of 3e-8 rounds to 0 or 6e-8."""
    assert actual.shape == expected.shape, (what, actual.shape, expected.shape)
    subnormal = float(jnp.finfo(actual.dtype).smallest_subnormal)
    a, e = as_f64(actual), as_f64(expected)
    np.testing.assert_array_equal(np.isnan(a), np.isnan(e), err_msg=f"{what}: NaN positions differ")
    inf = np.isinf(e)
    np.testing.assert_array_equal(a[inf], e[inf], err_msg=f"{what}: infinities differ")
    finite = np.isfinite(e)
    allowed = tol.rel * np.abs(e) + tol.terms * np.broadcast_to(mag, e.shape) + subnormal
    with np.errstate(invalid="ignore"):
        bad = finite & ~(np.abs(a - e) <= allowed)
    if bad.any():
        excess = np.where(bad, np.abs(a - e) / allowed, 0.0)
        i = np.unravel_index(np.argmax(excess), e.shape)
        raise AssertionError(
            f"{what}: {bad.sum()} of {e.size} elements beyond {tol}; worst at {tuple(map(int, i))}: "
            f"actual {a[i]!r}, expected {e[i]!r}, terms {np.broadcast_to(mag, e.shape)[i]:.3g}, "
            f"allowed error {allowed[i]:.3g}, error {abs(a[i] - e[i]):.3g} ({excess[i]:.3g}x)"
        )


def check_outputs(op: Op, x, params, ct, actual, expected, *, width, **kw):
    """Compares (y, grads) pairs from `run_both`, each result at the tolerance of its own dtype."""
    y, grads = actual
    y_ref, grads_ref = expected
    assert y.dtype == x.dtype, (y.dtype, x.dtype)
    mags = term_magnitudes(op, x, params, ct, y_ref, **kw)
    me = kw.get("memory_efficient", False)
    tol = result_tolerance(op, "y", y.dtype, x.dtype, width)
    assert_close(y, y_ref, tol=tol, mag=mags["y"], what=f"{op} output")
    inputs = (x, *params)
    for name, inp, g, g_ref in zip(("x", *op.params), inputs, grads, grads_ref):
        if inp is None:
            assert g is None and g_ref is None
            continue
        assert g.dtype == inp.dtype and g.shape == inp.shape, (name, g.dtype, g.shape, inp.dtype, inp.shape)
        tol = result_tolerance(op, name, g.dtype, x.dtype, width, me)
        assert_close(g, g_ref, tol=tol, mag=mags[name], what=f"{op} d{name}")


def check_op(op: Op, rng, shape, dtype, *, param_dtype=None, names=None, axis=-1, bounded_scale=False, **kw):
    """Forward and vjp of `op` on random data of `shape` against the float64 reference."""
    dtype = np.dtype(dtype)
    param_dtype = dtype if param_dtype is None else np.dtype(param_dtype)
    x = make_x(op, rng, shape, dtype)
    kw = dict(kw, axis=axis)
    if op.is_norm:
        k = 1 if isinstance(axis, int) else len(axis)
        norm_shape = tuple(shape[len(shape) - k :])
        params = make_params(op, rng, norm_shape, param_dtype, names, bounded_scale=bounded_scale)
        width = math.prod(norm_shape)
    else:
        params = ()
        axes = range(len(shape)) if axis is None else ((axis,) if isinstance(axis, int) else axis)
        width = math.prod(shape[a] for a in axes)
    ct = make_cotangent(rng, x)
    actual, expected = run_both(op, x, params, ct, **kw)
    check_outputs(op, x, params, ct, actual, expected, width=width, **kw)
    return actual


def op_params(ops=OPS):
    return pytest.mark.parametrize("op", ops, ids=str)


def op_and_param_subsets(ops=NORMS):
    """Parametrizes (op, names) over every subset of each op's optional parameters."""
    combos = []
    for op in ops:
        for mask in range(1 << len(op.params)):
            names = tuple(n for i, n in enumerate(op.params) if mask >> i & 1)
            combos.append(pytest.param(op, names, id=f"{op}-{'+'.join(names) or 'none'}"))
    return pytest.mark.parametrize("op,names", combos)
