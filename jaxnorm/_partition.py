"""Row sharding under `jit`: the custom calls of row ops run on each device's rows, no gather.

XLA's partitioner cannot see into a custom call, so without help it gathers every operand onto
each device around it. An op declared `row_sharded` is lowered through
`jax.experimental.custom_partitioning` instead: its rows ("R" operands and results) keep the
sharding of the first operand's row axis, its shared operands (scale, bias, tables) and its other
axes are replicated, and each device calls the kernel on its own rows. Per-column sums over the
rows ("G" results: the norm backward's scale/bias gradients) are summed over the devices that
split the rows (one all-reduce of [G, C] floats, never of x); vmap-folded groups (`groups` > 1)
are not split across devices. A sharded non-row axis (the normalized axis) is gathered first,
correct but not free. Both partitioners are served: Shardy through `sharding_rule`, GSPMD
through `infer_sharding_from_operands`.
"""

from __future__ import annotations

import functools
import math
import string

import jax
from jax.experimental.custom_partitioning import custom_partitioning
from jax.interpreters import mlir
from jax.sharding import NamedSharding, PartitionSpec

try:  # the partitioner needs the devices while lowering these primitives (as custom_partitioning's own)
    from jax._src.dispatch import prim_requires_devices_during_lowering as _NEEDS_DEVICES
except ImportError:  # pragma: no cover
    _NEEDS_DEVICES = None


def _explicit(x):
    """(mesh, spec padded to x's rank) where x lives on a mesh with an Explicit axis, else None."""
    sharding = getattr(jax.typeof(x), "sharding", None)
    mesh = getattr(sharding, "mesh", None)
    if mesh is None or not any(t == jax.sharding.AxisType.Explicit for t in mesh.axis_types):
        return None
    return mesh, tuple(sharding.spec) + (None,) * (x.ndim - len(sharding.spec))


def merge_axes(x, groups):
    """x reshaped so that each run of ``groups[i]`` consecutive axes becomes one axis (a group of
    0 axes: an axis of 1). On a mesh of Explicit axes a reshape must be told its output's sharding
    where the merge has none of its own (a sharded axis merged with an earlier one): a merged axis
    keeps its first axis's sharding when no other axis of its group is sharded, and is gathered
    otherwise, as an Auto mesh's partitioner gathers it (correct, not free)."""
    assert sum(groups) == x.ndim, (groups, x.shape)
    bounds = [sum(groups[:i]) for i in range(len(groups) + 1)]
    shape = tuple(x.shape)
    out = tuple(math.prod(shape[a:b]) for a, b in zip(bounds, bounds[1:]))
    explicit = _explicit(x)
    if explicit is None:
        return x.reshape(out)
    mesh, spec = explicit
    merged = lambda part: part[0] if part and all(s is None for s in part[1:]) else None  # noqa: E731
    out_spec = tuple(merged(spec[a:b]) for a, b in zip(bounds, bounds[1:]))
    return jax.lax.reshape(x, out, out_sharding=NamedSharding(mesh, PartitionSpec(*out_spec)))


def as_rows(x, k: int):
    """x as (rows, cols), its last k axes the columns ((rows,) for k = 0), by `merge_axes`."""
    return merge_axes(x, (x.ndim - k, k) if k else (x.ndim,))


def gathered(x, axes=None):
    """x with ``axes`` (default: every axis) unsharded, on a mesh of Explicit axes (elsewhere x):
    for the jnp steps beside a custom call that need a whole axis on each device (a sort over it,
    a gather along it), which JAX does not insert on such a mesh by itself."""
    explicit = _explicit(x)
    if explicit is None:
        return x
    mesh, spec = explicit
    axes = range(x.ndim) if axes is None else [a % x.ndim for a in axes]
    if all(spec[a] is None for a in axes):
        return x
    spec = tuple(None if i in axes else s for i, s in enumerate(spec))
    return jax.sharding.reshard(x, NamedSharding(mesh, PartitionSpec(*spec)))


def _symbols(spec: str) -> list[str]:
    return spec.rstrip("?").split(",")


def _per_row(spec: str, shape, n_rows: int) -> bool:
    """Whether an operand's first axis is the rows: "R", or a grouped "N" with one entry a row."""
    first = _symbols(spec)[0]
    return first == "R" or (first == "N" and len(shape) > 0 and shape[0] == n_rows)


def splits_rows(op, avals_in) -> bool:
    """Whether each device may run the op on its rows alone: every grouped ("N") operand present
    holds one entry for all rows or one a row (not one per vmapped example), and the op's own
    condition holds (sample: a key per row, since one shared key numbers the rows globally)."""
    n_rows = avals_in[0].shape[0]
    for spec, aval in zip(op.operands, avals_in):
        absent = spec.endswith("?") and aval.shape == (0,)  # an optional operand's placeholder
        if _symbols(spec)[0] == "N" and not absent and aval.shape[0] not in (1, n_rows):
            return False
    return op.rows_local is None or op.rows_local(avals_in)


def _sharding_rule(operands, results, avals_in) -> str:
    """Shardy's einsum-like rule: one factor per named dimension, "r" for the rows (and for
    grouped "N" axes with one entry a row); absent optional operands (empty placeholders), other
    "N" axes and "*" dimensions get factors of their own."""
    letters = iter(string.ascii_lowercase.replace("r", ""))
    names = {"R": "r"}
    n_rows = avals_in[0].shape[0]

    def factor(sym):
        if sym in ("*", "N") or sym not in names:
            f = next(letters)
            if sym not in ("*", "N"):
                names[sym] = f
            return f
        return names[sym]

    def side(specs, avals):
        out = []
        for spec, aval in zip(specs, avals):
            syms = _symbols(spec)
            if aval is not None and spec.endswith("?") and aval.shape == (0,):
                out.append(next(letters))
            elif aval is not None and syms[0] == "N" and _per_row(spec, aval.shape, n_rows):
                out.append(" ".join(["r"] + [factor(s) for s in syms[1:]]))
            else:
                out.append(" ".join(factor(s) for s in syms))
        return ", ".join(out)

    return f"{side(operands, avals_in)} -> {side(results, [None] * len(results))}"


def _row_axes(arg_shapes, params):
    spec = arg_shapes[0].sharding.spec
    rows = spec[0] if len(spec) else None
    return None if params.get("groups", 1) != 1 else rows


def _shardings(specs, shapes, mesh, rows, absent_ok, n_rows):
    out = []
    for spec, shape in zip(specs, shapes):
        is_rows = _per_row(spec, shape, n_rows) and not (absent_ok and spec.endswith("?") and shape == (0,))
        pspec = PartitionSpec(rows, *([None] * (len(shape) - 1))) if is_rows else PartitionSpec()
        out.append(NamedSharding(mesh, pspec))
    return tuple(out)


@functools.lru_cache(maxsize=None)
def _partitioned(op, raw, static_params, avals_in):
    params = dict(static_params)
    result_specs = [spec for spec, _ in op.results]

    def call(*args):
        return tuple(raw.bind(*args, **params))

    def result_shardings(mesh, arg_shapes, result_shape):
        rows = _row_axes(arg_shapes, params)
        shapes = [r.shape for r in jax.tree.leaves(result_shape)]
        return rows, _shardings(result_specs, shapes, mesh, rows, absent_ok=False, n_rows=arg_shapes[0].shape[0])

    def infer(mesh, arg_shapes, result_shape):
        return result_shardings(mesh, arg_shapes, result_shape)[1]

    def partition(mesh, arg_shapes, result_shape):
        rows, res = result_shardings(mesh, arg_shapes, result_shape)
        args = _shardings(op.operands, [a.shape for a in arg_shapes], mesh, rows, absent_ok=True,
                          n_rows=arg_shapes[0].shape[0])

        def lower(*args):
            outs = raw.bind(*args, **params)
            if rows is None:
                return tuple(outs)
            return tuple(jax.lax.psum(o, rows) if _symbols(s)[0] == "G" else o for s, o in zip(result_specs, outs))

        return mesh, lower, res, args

    fn = custom_partitioning(call)
    fn.def_partition(partition, infer_sharding_from_operands=infer,
                     sharding_rule=_sharding_rule(op.operands, result_specs, avals_in))
    return fn


def _manual(axis_context) -> bool:
    """Whether the op is lowered inside shard_map (some mesh axes in manual mode): the values
    are per-device there, and a custom call on them needs no partitioner."""
    return bool(getattr(axis_context, "manual_axes", None))


def row_sharded_lowering(ctx, *args, op, raw, **params):
    """Lowers `raw` (the op's direct custom call) through custom_partitioning."""
    if (ctx.module_context.lowering_parameters.for_export or _manual(ctx.module_context.axis_context)
            or not splits_rows(op, ctx.avals_in)):
        # custom_partitioning's partitioner callback cannot be serialized: an exported artifact
        # holds the plain custom call (XLA gathers around it when the artifact is sharded). Inside
        # shard_map the operands are already each device's own: nothing is left to partition
        # (and XLA 0.11's partitioner crashes on the callback under shard_map's transpose). Ops
        # whose rows depend on each other (see splits_rows) are gathered by XLA, correctly.
        return mlir.lower_fun(lambda *a: raw.bind(*a, **params), multiple_results=True)(ctx, *args)
    fn = _partitioned(op, raw, tuple(sorted(params.items())), tuple(ctx.avals_in))
    return mlir.lower_fun(lambda *a: list(fn(*a)), multiple_results=True)(ctx, *args)


def needs_devices(prim):
    if _NEEDS_DEVICES is not None:
        _NEEDS_DEVICES.add(prim)
