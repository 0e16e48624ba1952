"""Bad arguments fail while tracing, before anything runs, with a message naming the argument.

Calls go through jax.eval_shape on abstract arrays: no kernel can run, so an error seen here is
a trace-time error.
"""

import re

import numpy as np
import pytest

import jax
import jax.numpy as jnp

from cases import F32, NORMS, SOFTMAXES, op_params

X = jax.ShapeDtypeStruct((4, 16), F32)


def spec(shape, dtype=F32):
    return jax.ShapeDtypeStruct(shape, dtype)


def trace(fn, *args, **kwargs):
    """Traces fn on abstract args (keyword args are static)."""
    return jax.eval_shape(lambda *a: fn(*a, **kwargs), *args)


def raises(exc, *fragments):
    """pytest.raises matching every fragment, in order, in the message."""
    return pytest.raises(exc, match=".*".join(re.escape(f) for f in fragments))


# ---------------------------------------------------------------------------------------------
# x


@op_params()
@pytest.mark.parametrize("dtype", [jnp.int32, jnp.bool_], ids=str)
def test_non_float_x(op, dtype):
    with raises(TypeError, "`x`", np.dtype(dtype).name):
        trace(op.fn, spec((4, 16), dtype))


@op_params()
def test_float64_x(op):
    with raises(TypeError, "`x`", "float64", "(4, 16)"):
        trace(op.fn, spec((4, 16), jnp.float64))


@op_params()
def test_scalar_x(op):
    with raises(ValueError, "`x`", "scalar"):
        trace(op.fn, spec(()))


@op_params()
def test_x_none(op):
    with raises(TypeError, "`x`", "None"):
        op.fn(None)


@op_params(NORMS)
def test_zero_size_normalized_axis(op):
    with raises(ValueError, "zero elements", "(0,)"):
        trace(op.fn, spec((4, 0)))
    with raises(ValueError, "zero elements", "(3, 0)"):
        trace(op.fn, spec((2, 3, 0)), axis=(-2, -1))


# ---------------------------------------------------------------------------------------------
# axis


@op_params()
@pytest.mark.parametrize("axis", [2, (-3, -1)], ids=str)
def test_axis_out_of_range(op, axis):
    with raises(ValueError, "axis", "out of range", "rank 2"):
        trace(op.fn, X, axis=axis)


@op_params(NORMS)
@pytest.mark.parametrize("shape,axis", [((4, 16), 0), ((2, 4, 16), (0, 2))], ids=str)
def test_norm_axis_not_trailing(op, shape, axis):
    with raises(ValueError, "`axis`", "trailing", str(shape)):
        trace(op.fn, spec(shape), axis=axis)


@op_params()
def test_repeated_axis(op):
    with raises(ValueError, "`axis`", "repeats"):
        trace(op.fn, X, axis=(1, -1))


@op_params()
def test_empty_axis_tuple(op):
    with raises(ValueError, "`axis`", "at least one"):
        trace(op.fn, X, axis=())


@op_params()
def test_non_integer_axis(op):
    with raises(TypeError, "`axis`", "ints"):
        trace(op.fn, X, axis=(1.0,))
    with raises(TypeError, "`axis`", "ints"):
        trace(op.fn, X, axis=(True,))


@op_params()
@pytest.mark.parametrize("axis", [1.0, True, "1", np.array(-1)], ids=repr)
def test_axis_of_another_type(op, axis):
    """Not an int nor a tuple of ints (None too, except for softmax, where it means every axis)."""
    with raises(TypeError, "`axis` must be an int or a tuple of ints"):
        trace(op.fn, X, axis=axis)


@op_params(NORMS)
def test_axis_none_for_the_norms(op):
    with raises(TypeError, "`axis` must be an int or a tuple of ints", "None"):
        trace(op.fn, X, axis=None)


# ---------------------------------------------------------------------------------------------
# scale, bias, epsilon


def _norm_call(op, name, p):
    """Calls op with only parameter `name` set to p."""
    kwargs = {name: p}
    return lambda x: op.fn(x, **kwargs)


NORM_PARAMS = [pytest.param(op, name, id=f"{op}-{name}") for op in NORMS for name in op.params]


@pytest.mark.parametrize("op,name", NORM_PARAMS)
@pytest.mark.parametrize("shape", [(15,), (4, 16), ()], ids=str)
def test_param_wrong_shape(op, name, shape):
    with raises(ValueError, f"`{name}`", "(16,)", f"got {shape}"):
        trace(lambda x, p: _norm_call(op, name, p)(x), X, spec(shape))


@pytest.mark.parametrize("op,name", NORM_PARAMS)
def test_param_shape_follows_axes(op, name):
    """With axis=(-2, -1) a parameter must have both normalized dimensions."""
    with raises(ValueError, f"`{name}`", "(4, 16)", "got (16,)"):
        trace(lambda x, p: op.fn(x, **{name: p}, axis=(-2, -1)), spec((2, 4, 16)), spec((16,)))


@pytest.mark.parametrize("op,name", NORM_PARAMS)
def test_param_not_float(op, name):
    with raises(TypeError, f"`{name}`", "floating", "int32"):
        trace(lambda x, p: _norm_call(op, name, p)(x), X, spec((16,), jnp.int32))


@op_params(NORMS)
@pytest.mark.parametrize("epsilon", [-1e-6, float("nan")], ids=str)
def test_bad_epsilon(op, epsilon):
    with raises(ValueError, "`epsilon`", ">= 0"):
        trace(op.fn, X, epsilon=epsilon)


@op_params(NORMS)
@pytest.mark.parametrize("kw", [dict(epsilon="1e-5"), dict(epsilon=True), dict(scale_offset=True),
                                dict(memory_efficient="no"), dict(memory_efficient=1)], ids=str)
def test_static_arguments_of_another_type(op, kw):
    """A string or a bool is not a float, and a string such as "no" is not a flag."""
    (name,) = kw
    with raises(TypeError, f"`{name}` must be a Python"):
        trace(lambda x, s: op.fn(x, s, **kw), X, spec((16,)))


@op_params(NORMS)
def test_traced_epsilon(op):
    """epsilon is a kernel attribute: it must be known while tracing."""
    with raises(TypeError, "`epsilon`", "Python float"):
        jax.eval_shape(lambda x, e: op.fn(x, epsilon=e), X, spec((), F32))


# ---------------------------------------------------------------------------------------------
# where


@op_params(SOFTMAXES)
@pytest.mark.parametrize("shape", [(15,), (16, 4)], ids=str)
def test_where_wrong_shape(op, shape):
    with raises(ValueError, "`where`", str(shape), "(4, 16)"):
        trace(lambda x, w: op.fn(x, where=w), X, spec(shape, jnp.bool_))


@op_params(SOFTMAXES)
def test_where_float(op):
    with raises(TypeError, "`where`", "boolean", "float32"):
        trace(lambda x, w: op.fn(x, where=w), X, spec((4, 16), F32))
