"""One helper that turns every jaxnorm FFI target into a JAX primitive.

Every handler works on operands of rank <= 2; the public functions reshape the user's arrays into
that view. An op declares each operand's and result's shape as a *spec*, a comma-separated list
of dimension symbols, and the helper derives abstract evaluation, the lowering and the vmap rule
from the specs alone:

  "R"   the rows: the first operand's first dimension. vmap folds a batch axis into it.
  "C"   the columns: the first operand's second dimension.
  "N"   (operands, first dimension only) a *grouped* dimension of any size dividing R: row r
        reads entry r // (R // N), so one entry can serve every row. vmap folds into it like R.
  "*"   (operands) any size.
  "G"   (results) the `groups` parameter: rows split into G equal groups (per-group column sums).
        vmap multiplies G by the batch size, so per-example sums stay per example.
  "k"   (results) the `k` parameter.
  Any other name takes its size from the first operand dimension it labels ("B,L" binds B and L;
  "T" in a result is then the size of an operand's T), else from the parameter of that name
  ("heads"); a number is that size.
  A trailing "?" marks an optional operand, passed as an empty placeholder (0,) when absent; it
  binds no size.

An operand whose spec starts with "R" or "N" is batched by folding; any other operand (per-column
parameters, "C") is shared by every row, and a batched one makes vmap map sequentially. A family
whose operands are not rows (index maps, sequences) replaces the vmap rule with its own
(`batching.primitive_batchers[prim]`), as jaxnorm.padding does.
A result's dtype is "x" (the first operand's), an int i (operand i's: an op whose first operand is
an index, as jaxnorm.embedding's), a numpy dtype, or a function of (avals, params).

An op may alias results with operands (`aliases`): a KV cache updated in place.

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
from jax.interpreters import ad, batching, mlir
from jax.core import ShapedArray

from jaxnorm import _ffi, _partition
from jaxnorm._vma import result_aval

NOT_MAPPED = None  # how batching rules mark an operand without a batch axis


@dataclasses.dataclass(frozen=True)
class FfiOp:
    name: str  # FFI target name, also the primitive's name
    operands: tuple[str, ...]  # shape specs, see module docstring
    results: tuple[tuple[str, object], ...]  # (spec, dtype): "x" the first operand's, int i operand i's,
    # or (avals, params) -> dtype
    attrs: tuple[str, ...]  # params passed to the handler as FFI attributes
    # (avals_in, params, platform) -> extra workspace results appended in the lowering
    workspace: Callable[[Sequence[ShapedArray], dict, str], list[ShapedArray]] | None = None
    # (operand, result) pairs that share one buffer: the handler updates the operand in place
    # (XLA copies it first only when the operand is still needed elsewhere).
    aliases: tuple[tuple[int, int], ...] = ()
    # Under jit with sharded rows, each device runs the kernel on its rows (jaxnorm._partition).
    row_sharded: bool = False
    # (avals_in) -> whether these operands let each device take its rows alone (None: always).
    rows_local: Callable[[Sequence[ShapedArray]], bool] | None = None
    # (avals_in) -> attributes computed from the operands' shapes at lowering, so that they follow
    # vmap's folding and each device's shard (a workspace bound), never bound as params.
    derived: Callable[[Sequence[ShapedArray]], dict] | None = None
    # (avals_in) -> each operand's layout (minor-to-major, None: row-major), for operands whose
    # size-1 axes the caller's reshape places where a row-major constraint would cost a copy.
    operand_layouts: Callable[[Sequence[ShapedArray]], list] | None = None


# Every FFI target jaxnorm lowers to, by name, in the order declared: filled by make_primitive so
# that nothing else (the export checks, the environment report) keeps its own list.
FFI_OPS: dict[str, FfiOp] = {}


def _symbols(spec: str) -> list[str]:
    return spec.rstrip("?").split(",")


def _folds(spec: str) -> bool:
    return _symbols(spec)[0] in ("R", "N")


_PARAM_OF = {"G": "groups"}


def _bound_sizes(op: FfiOp, avals, params) -> dict:
    sizes = {}
    for spec, aval in zip(op.operands, avals):
        if spec.endswith("?"):
            continue
        for sym, n in zip(_symbols(spec), aval.shape):
            if sym not in ("N", "*"):
                sizes.setdefault(sym, n)
    return sizes


def _size(sym: str, sizes: dict, params: dict) -> int:
    if sym.isdigit():
        return int(sym)
    if sym in sizes:
        return sizes[sym]
    return params[_PARAM_OF.get(sym, sym)]


def _result_avals(op: FfiOp, avals, params):
    sizes = _bound_sizes(op, avals, params)
    out = []
    for spec, dtype in op.results:
        if isinstance(dtype, int):
            dt = avals[dtype].dtype
        elif callable(dtype) and not isinstance(dtype, (type, np.dtype)):  # np.float32 is callable too
            dt = np.dtype(dtype(avals, params))
        else:
            dt = avals[0].dtype if dtype == "x" else np.dtype(dtype)
        out.append(result_aval(avals, tuple(_size(s, sizes, params) for s in _symbols(spec)), dt))
    return out


def _attr_value(v):
    # FFI attributes are exact-typed: the handlers bind float (f32) and bool.
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, float):
        return np.float32(v)
    return v


def _lowering(ctx, *args, op: FfiOp, platform: str, **params):
    if platform == "cuda" and not _ffi.cuda_built():
        raise RuntimeError(_ffi.cuda_unavailable_reason())
    if op.derived:
        params = {**params, **op.derived(ctx.avals_in)}
    extra = op.workspace(ctx.avals_in, params, platform) if op.workspace else []
    n_out = len(ctx.avals_out)
    if extra:
        ctx = ctx.replace(avals_out=[*ctx.avals_out, *extra])
    attrs = {k: _attr_value(params[k]) for k in op.attrs}
    aliasing = {"operand_output_aliases": dict(op.aliases)} if op.aliases else {}
    if op.operand_layouts:
        aliasing["operand_layouts"] = op.operand_layouts(ctx.avals_in)
    results = jax.ffi.ffi_lowering(op.name, **aliasing)(ctx, *args, **attrs)
    return results[:n_out]


def _fold(arg, bdim, size):
    """Moves the batch axis to the front (broadcasting an unbatched operand) and folds it into rows."""
    if bdim is NOT_MAPPED:
        arg = jnp.broadcast_to(arg, (size, *arg.shape))
    else:
        arg = jnp.moveaxis(arg, bdim, 0)
    return arg.reshape((size * arg.shape[1], *arg.shape[2:]))


def map_batching(args, dims, *, prim: Primitive, **params):
    """The vmap rule of last resort: one launch per example (lax.map over the batch)."""
    moved = [a if d is NOT_MAPPED else jnp.moveaxis(a, d, 0) for a, d in zip(args, dims)]
    mapped_idx = [i for i, d in enumerate(dims) if d is not NOT_MAPPED]

    def body(sl):
        full = list(moved)
        for i, s in zip(mapped_idx, sl):
            full[i] = s
        return tuple(prim.bind(*full, **params))

    outs = jax.lax.map(body, tuple(moved[i] for i in mapped_idx))
    return list(outs), [0] * len(outs)


def _empty_batch(args, dims, prim: Primitive, params):
    """vmap over an axis of size 0: no launch, empty results of the per-example shapes."""
    one = [a if d is NOT_MAPPED else jax.ShapeDtypeStruct(a.shape[:d] + a.shape[d + 1:], a.dtype)
           for a, d in zip(args, dims)]
    outs = jax.eval_shape(lambda *a: prim.bind(*a, **params), *one)
    return [jnp.zeros((0, *o.shape), o.dtype) for o in outs], [0] * len(outs)


def _batching(args, dims, *, specs: tuple[str, ...], prim: Primitive, **params):
    size = next(a.shape[d] for a, d in zip(args, dims) if d is not NOT_MAPPED)
    if size == 0:
        return _empty_batch(args, dims, prim, params)
    shared_batched = any(
        not _folds(spec) and d is not NOT_MAPPED for spec, d in zip(specs, dims)
    )
    if shared_batched:
        # Per-example shared operands (scale/bias) cannot share one launch: map over the batch.
        return map_batching(args, dims, prim=prim, **params)

    folded = []
    for a, d, spec in zip(args, dims, specs):
        absent = spec.endswith("?") and d is NOT_MAPPED and a.shape == (0,)
        folded.append(_fold(a, d, size) if _folds(spec) and not absent else a)
    new_params = dict(params)
    if "groups" in params:
        new_params["groups"] = params["groups"] * size
    outs = prim.bind(*folded, **new_params)
    unfolded = [o.reshape((size, o.shape[0] // size, *o.shape[1:])) for o in outs]
    return unfolded, [0] * len(unfolded)


def make_primitive(op: FfiOp) -> Primitive:
    if op.name in FFI_OPS:
        raise ValueError(f"FFI target {op.name} declared twice")
    FFI_OPS[op.name] = op
    prim = Primitive(op.name)
    prim.multiple_results = True
    prim.def_impl(partial(jax._src.dispatch.apply_primitive, prim))
    prim.def_abstract_eval(lambda *avals, **params: _result_avals(op, avals, params))
    direct = prim
    if op.row_sharded:
        # The primitive lowers through custom_partitioning, which binds this twin on each device.
        direct = Primitive(op.name + "_local")
        direct.multiple_results = True
        direct.def_abstract_eval(lambda *avals, **params: _result_avals(op, avals, params))
        mlir.register_lowering(prim, partial(_partition.row_sharded_lowering, op=op, raw=direct))
        _partition.needs_devices(prim)
    for platform in ("cpu", "cuda"):
        mlir.register_lowering(direct, partial(_lowering, op=op, platform=platform), platform=platform)
    batching.primitive_batchers[prim] = partial(_batching, specs=op.operands, prim=prim)
    return prim


def define_jvp_by_formula(prim: Primitive, formula: Callable) -> None:
    """Gives a kernel primitive the JVP of its jnp `formula` (same operands and params): the
    kernel computes the primal, jax.jvp of the formula the tangents. For the backward kernels,
    whose derivatives only second-order differentiation needs."""

    def jvp(primals, tangents, **params):
        tangents = [ad.instantiate_zeros(t) for t in tangents]
        _, touts = jax.jvp(partial(formula, **params), tuple(primals), tuple(tangents))
        return prim.bind(*primals, **params), touts

    ad.primitive_jvps[prim] = jvp


class FormulaPrimitive:
    """A primitive computed by a jax.numpy `formula(*operands, **params) -> list of arrays`.

    For the tangent maps of the kernels (jax.jvp evaluates them with jnp; the op's module gives
    the primitive a transpose rule that calls its backward kernel, so reverse mode runs the
    kernel). Being a primitive keeps it whole through linearization, so the transpose rule sees
    it; its own derivatives (second order) are jax.jvp of the formula, and vmap folds batch axes
    into rows per the operand `specs` as for FfiOp, re-binding the primitive.

    Absent optional operands (empty placeholders at "?" specs) are not bound: the primitive
    re-creates them, so they never become residuals of reverse mode. (A zero-size residual
    crossing a shard_map boundary crashes Shardy's partitioner in jax 0.11.)
    """

    def __init__(self, name: str, formula: Callable, specs: tuple[str, ...]):
        self.specs = specs
        prim = self.prim = Primitive(name)
        prim.multiple_results = True
        full = self._full
        prim.def_impl(lambda *args, absent, **params: formula(*full(args, absent), **params))

        def abstract(*avals, absent, **params):
            shapes = (jax.ShapeDtypeStruct(a.shape, a.dtype) for a in avals)
            outs = jax.eval_shape(lambda *a: formula(*full(a, absent), **params), *shapes)
            return [result_aval(avals, o.shape, o.dtype) for o in outs]

        def jvp(primals, tangents, absent, **params):
            tangents = [ad.instantiate_zeros(t) for t in tangents]
            return jax.jvp(lambda *a: formula(*full(a, absent), **params), tuple(primals), tuple(tangents))

        def batch(args, dims, absent, **params):
            present = tuple(sp for i, sp in enumerate(specs) if i not in dict(absent))
            return _batching(args, dims, specs=present, prim=prim, absent=absent, **params)

        prim.def_abstract_eval(abstract)
        mlir.register_lowering(
            prim, mlir.lower_fun(lambda *a, absent, **params: formula(*full(a, absent), **params), multiple_results=True))
        ad.primitive_jvps[prim] = jvp
        batching.primitive_batchers[prim] = batch

    @staticmethod
    def _full(present, absent):
        """The operand list with the absent placeholders ((index, dtype) pairs) put back."""
        args, it = [], iter(present)
        where = dict(absent)
        for i in range(len(present) + len(where)):
            args.append(empty_placeholder(where[i]) if i in where else next(it))
        return args

    def bind(self, *operands, **params):
        absent = tuple((i, np.dtype(a.dtype)) for i, (a, spec) in enumerate(zip(operands, self.specs))
                       if spec.endswith("?") and a.shape == (0,))
        where = dict(absent)
        return self.prim.bind(*(a for i, a in enumerate(operands) if i not in where), absent=absent, **params)

    def def_transpose(self, rule: Callable) -> None:
        """`rule(cts, *operands, **params)` sees every operand (absent ones as placeholders) and
        returns a cotangent (or None) for each; those of absent operands are dropped."""

        def transpose(cts, *present, absent, **params):
            out = rule(cts, *self._full(present, absent), **params)
            where = dict(absent)
            return [c for i, c in enumerate(out) if i not in where]

        ad.primitive_transposes[self.prim] = transpose


def formula_primitive(name: str, formula: Callable, specs: tuple[str, ...]) -> FormulaPrimitive:
    return FormulaPrimitive(name, formula, specs)


def empty_placeholder(dtype=jnp.float32):
    """Stands in for an absent optional operand (no scale, no bias, no mask)."""
    return jnp.zeros((0,), dtype)
