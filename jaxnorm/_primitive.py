"""One helper that turns an FFI target over rows into a JAX primitive.

Every jaxnorm handler works on rank-2 (rows, cols) operands; the public functions reshape the
user's array into that view. Each operand and result has a *role* that says how its shape
follows from (rows, cols) and how vmap folds a batch axis into it:

  "rows"      (R, C)   the data: x, y, dy, dx. vmap folds the batch axis into R.
  "rows?"     (R, C) or an empty placeholder (0,) when absent (the softmax mask).
  "rowstat"   (R,)     per-row float32 statistics (mean, rstd). Folded into R.
  "col"       (C,) or an empty placeholder (0,): per-column parameters (scale, bias), shared by
              every row. A batched "col" cannot be folded; vmap then maps sequentially.
  "groupcol"  (G, C)   per-group column sums (the scale/bias gradients). `groups` = G is a
              parameter: rows split into G equal groups, and vmap multiplies G by the batch size,
              so a vmapped gradient stays per-example without a loop.

Extra results that the kernels need as workspace (never seen by JAX users) are added in the
lowering only, so their sizes may depend on the shapes without leaking into abstract evaluation.
"""

from __future__ import annotations

import dataclasses
from functools import partial
from typing import Callable, Sequence

import numpy as np

import jax
import jax.numpy as jnp
from jax.extend.core import Primitive
from jax.interpreters import batching, mlir
from jax.core import ShapedArray

from jaxnorm import _ffi
from jaxnorm._vma import result_aval

NOT_MAPPED = None  # how batching rules mark an operand without a batch axis


@dataclasses.dataclass(frozen=True)
class RowOp:
    name: str  # FFI target name, also the primitive's name
    operands: tuple[str, ...]  # roles, see module docstring
    results: tuple[tuple[str, object], ...]  # (role, dtype): dtype "x" means the first operand's
    attrs: tuple[str, ...]  # params passed to the handler as FFI attributes
    # (avals_in, params) -> extra workspace results appended in the lowering
    workspace: Callable[[Sequence[ShapedArray], dict], list[ShapedArray]] | None = None


def _result_avals(op: RowOp, avals, params):
    rows, cols = avals[0].shape
    out = []
    for role, dtype in op.results:
        dt = avals[0].dtype if dtype == "x" else np.dtype(dtype)
        if role == "rows":
            shape = (rows, cols)
        elif role == "rowstat":
            shape = (rows,)
        elif role == "groupcol":
            shape = (params["groups"], cols)
        else:
            raise AssertionError(role)
        out.append(result_aval(avals, shape, dt))
    return out


def _attr_value(v):
    # FFI attributes are exact-typed: the handlers bind float (f32) and bool.
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, float):
        return np.float32(v)
    return v


def _lowering(ctx, *args, op: RowOp, platform: str, **params):
    if platform == "cuda" and not _ffi.cuda_built():
        raise RuntimeError(_ffi.cuda_unavailable_reason())
    extra = op.workspace(ctx.avals_in, params) if op.workspace else []
    n_out = len(ctx.avals_out)
    if extra:
        ctx = ctx.replace(avals_out=[*ctx.avals_out, *extra])
    attrs = {k: _attr_value(params[k]) for k in op.attrs}
    results = jax.ffi.ffi_lowering(op.name)(ctx, *args, **attrs)
    return results[:n_out]


def _fold(arg, bdim, size):
    """Moves the batch axis to the front (broadcasting an unbatched operand) and folds it into rows."""
    if bdim is NOT_MAPPED:
        arg = jnp.broadcast_to(arg, (size, *arg.shape))
    else:
        arg = jnp.moveaxis(arg, bdim, 0)
    return arg.reshape((size * arg.shape[1], *arg.shape[2:]))


def _batching(args, dims, *, op: RowOp, prim: Primitive, **params):
    size = next(a.shape[d] for a, d in zip(args, dims) if d is not NOT_MAPPED)
    col_batched = any(
        role == "col" and d is not NOT_MAPPED for role, d in zip(op.operands, dims)
    )
    if col_batched:
        # Per-example scale/bias cannot share one launch: map over the batch, one call each.
        moved = [a if d is NOT_MAPPED else jnp.moveaxis(a, d, 0) for a, d in zip(args, dims)]
        mapped_idx = [i for i, d in enumerate(dims) if d is not NOT_MAPPED]

        def body(sl):
            full = list(moved)
            for i, s in zip(mapped_idx, sl):
                full[i] = s
            return tuple(prim.bind(*full, **params))

        outs = jax.lax.map(body, tuple(moved[i] for i in mapped_idx))
        return list(outs), [0] * len(outs)

    folded = []
    for a, d, role in zip(args, dims, op.operands):
        absent = role == "rows?" and a.ndim == 1
        folded.append(a if role == "col" or absent else _fold(a, d, size))
    new_params = dict(params)
    if "groups" in params:
        new_params["groups"] = params["groups"] * size
    outs = prim.bind(*folded, **new_params)
    unfolded = [o.reshape((size, o.shape[0] // size, *o.shape[1:])) for o in outs]
    return unfolded, [0] * len(unfolded)


def make_primitive(op: RowOp) -> Primitive:
    prim = Primitive(op.name)
    prim.multiple_results = True
    prim.def_impl(partial(jax._src.dispatch.apply_primitive, prim))
    prim.def_abstract_eval(lambda *avals, **params: _result_avals(op, avals, params))
    for platform in ("cpu", "cuda"):
        mlir.register_lowering(prim, partial(_lowering, op=op, platform=platform), platform=platform)
    batching.primitive_batchers[prim] = partial(_batching, op=op, prim=prim)
    return prim


def empty_placeholder(dtype=jnp.float32):
    """Stands in for an absent optional operand (no scale, no bias, no mask)."""
    return jnp.zeros((0,), dtype)
