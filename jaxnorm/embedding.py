"""Token embedding lookup fused with the position encoding (FasterTransformer's
``embedding_position_lookups`` / ``sine_position_encoder``): one pass reads each token's table row
and writes ``table[id] * scale + PE(position)``.

**Encoding.** The sinusoidal encoding of tensor2tensor's ``get_timing_signal_1d`` and
FasterTransformer's ``sine_position_encoder``: for a width ``d`` (even) and ``i < d / 2``,
``inv[i] = exp(-i * log(10000) / max(d / 2 - 1, 1))`` and ``PE[p] = concat(sin(p * inv), cos(p *
inv))``: the first half sines, the second half cosines (not interleaved). ``inv`` is computed once
in float64 and rounded to float32 (``jaxnorm.reference.sine_inv_timescales``); the kernels compute
``float32(p) * inv[i]`` and accurate float32 sine and cosine of it (no fast-math approximations,
so large positions are fine). Negative positions are allowed: the encoding is just the formula.
With ``pos_table`` ``[max_pos, d]`` (a learned or precomputed table, FasterTransformer's table
form) ``pos_table[position]`` is added instead.

**Out of range.** Ids are clamped to ``[0, vocab - 1]`` and, with ``pos_table``, positions to
``[0, max_pos - 1]``, like ``jnp.take``'s gathers (``table[ids]``): a traced value cannot be
rejected at trace time, and nothing is ever read out of bounds. (Ids wider than int32 are clamped
before the cast to int32.)

**Arithmetic.** ``table[id] * scale`` and its sum with the encoding in float32, rounded once to the
table's dtype (float32, bfloat16 or float16). ``scale`` defaults to ``sqrt(d)`` (FasterTransformer's,
and the Transformer's, convention).

**Gradients.** With respect to ``table`` and ``pos_table``, in reverse and forward mode (the
forward kernel's JVP is the lookup of the tables' tangents, whose transpose is the kernel below);
ids and positions are integers. The table gradient is a scatter-add made reproducible: the flat ids are sorted stably
(XLA's sort is deterministic), then one kernel sums, for each run of equal ids, the rows of
``dout * scale`` in sorted order (float32, rounded once; zero rows for ids that do not occur). No
float atomics: the same bits on every run. The ``pos_table`` gradient is the same kernel over the
positions.
"""

from __future__ import annotations

import math

import numpy as np

import jax
import jax.numpy as jnp
from jax.interpreters import ad, batching

from jaxnorm import _checks
from jaxnorm._ops import embed_bwd_p, embed_fwd_p
from jaxnorm._partition import as_rows, gathered
from jaxnorm._primitive import NOT_MAPPED, empty_placeholder, formula_primitive, map_batching
from jaxnorm._vma import vary_together
from jaxnorm.reference import sine_inv_timescales

_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1


def embed_with_position(ids, table, *, position, scale=None, pos_table=None):
    """``table[ids] * scale + PE(position)``, computed in float32 and rounded once.

    Args:
      ids: integer array of any shape ``[...]`` (cast to int32; clamped to ``[0, vocab - 1]``).
      table: ``[vocab, d]`` float32, bfloat16 or float16, ``d`` even.
      position: a Python int (every token at that position, e.g. one decoding step), or an integer
        array broadcastable to ``ids.shape`` (per-token positions, e.g. ``[batch, 1]`` per
        sequence, or ``[seq]`` for a prompt). Positions are int32: an array of a wider type is
        clamped to the int32 range (a Python int outside it raises).
      scale: a Python float multiplying the table rows; default ``sqrt(d)``.
      pos_table: optional ``[max_pos, d]`` of the table's dtype: added at the (clamped) positions
        instead of the computed sinusoidal encoding.

    Returns:
      ``[..., d]`` in the table's dtype. See the module docstring for the encoding's convention.
    """
    fn = "embed_with_position"
    ids = _checks.as_array(ids, fn, "ids")
    if not jnp.issubdtype(ids.dtype, jnp.integer):
        raise TypeError(f"{fn}: `ids` must be an integer array, got {np.dtype(ids.dtype)} with shape "
                        f"{tuple(ids.shape)}")
    table = _checks.as_array(table, fn, "table")
    if table.ndim != 2:
        raise ValueError(f"{fn}: `table` must have shape [vocab, d], got {tuple(table.shape)}")
    if np.dtype(table.dtype) not in _checks.SUPPORTED:
        raise TypeError(f"{fn}: `table` must be float32, bfloat16 or float16, got {np.dtype(table.dtype)}")
    vocab, d = table.shape
    if d % 2:
        raise ValueError(f"{fn}: `table`'s width d must be even (sine and cosine halves), got shape "
                         f"{tuple(table.shape)}")
    if vocab == 0:
        raise ValueError(f"{fn}: `table` has no rows: shape {tuple(table.shape)}")
    scale = _scale(scale, d, fn)
    position = _position(position, ids.shape, fn)
    max_pos = 0
    if pos_table is not None:
        pos_table = _checks.as_array(pos_table, fn, "pos_table")
        if pos_table.ndim != 2 or pos_table.shape[1] != d or pos_table.shape[0] == 0:
            raise ValueError(f"{fn}: `pos_table` must have shape [max_pos >= 1, d] = [max_pos, {d}], got "
                             f"{tuple(pos_table.shape)}")
        if pos_table.dtype != table.dtype:
            raise TypeError(f"{fn}: `pos_table` must have the table's dtype {np.dtype(table.dtype)}, got "
                            f"{np.dtype(pos_table.dtype)}")
        max_pos = pos_table.shape[0]
    n = math.prod(ids.shape)
    if n == 0 or d == 0:
        return jnp.zeros((*ids.shape, d), table.dtype)
    ids32 = as_rows(_checks.int32_clamped(ids, 0, vocab - 1), 0)
    pos32 = _checks.int32_clamped(position, 0, max_pos - 1) if max_pos else \
        _checks.int32_clamped(position, _INT32_MIN, _INT32_MAX)
    pos32 = as_rows(jnp.broadcast_to(pos32, ids.shape), 0)
    ids32, pos32, table, pos_table = vary_together(ids32, pos32, table, pos_table)
    pt = empty_placeholder(table.dtype) if pos_table is None else pos_table
    out = _embed(ids32, pos32, table, pt, (scale, vocab, max_pos))
    return out.reshape(*ids.shape, d)


# ---- the core: ids, positions (N) int32; static (scale, vocab, max_pos) ----


def _embed(ids, pos, table, pt, static):
    scale, _, max_pos = static
    d = table.shape[1]
    inv = empty_placeholder() if max_pos else jnp.asarray(sine_inv_timescales(d))
    (out,) = embed_fwd_p.bind(ids, pos, table, pt, inv, scale=scale, has_pos_table=bool(max_pos))
    return out


def segment_sum_rows(dout, index, rows: int, scale: float):
    """``g[v] = sum over t with index[t] == v of dout[t] * scale`` (float32, rounded once to
    dout's dtype), in a fixed order: ``index`` (N) int32 in ``[0, rows)`` sorted stably, then each
    run summed in sorted order by one kernel. ``dout`` ``[N, d]``; returns ``[rows, d]``."""
    n = index.shape[0]
    index = gathered(index)  # the sort needs every token's index on each device
    sorted_index, order = jax.lax.sort((index, jnp.arange(n, dtype=jnp.int32)), num_keys=1, is_stable=True)
    (g,) = embed_bwd_p.bind(dout, order, sorted_index, rows=rows, scale=float(scale))
    return g


# ---- derivatives ----
# As for the norms (jaxnorm/norm.py): the forward kernel's JVP is embed_tangent_p, the lookup of
# the tables' tangents (linear in them), whose transpose is the sorted segment sum above, so
# reverse mode never scatters with atomics.


def _tangent_formula(ids, pos, dtable, dpt, *, scale, has_pos_table):
    rows = jnp.take(dtable, jnp.clip(ids, 0, dtable.shape[0] - 1), axis=0).astype(jnp.float32) * scale
    if has_pos_table:
        rows = rows + jnp.take(dpt, jnp.clip(pos, 0, dpt.shape[0] - 1), axis=0).astype(jnp.float32)
    return [rows.astype(dtable.dtype)]


embed_tangent_p = formula_primitive("jaxnorm_embed_tangent", _tangent_formula, ("R", "R", "V,D", "P,D?"))


def _tangent_transpose(cts, ids, pos, dtable, dpt, *, scale, has_pos_table):
    (ct,) = cts
    if type(ct) is ad.Zero:
        return [None] * 4
    vocab = dtable.aval.shape[0]
    gt = segment_sum_rows(ct, jnp.clip(ids, 0, vocab - 1), vocab, scale) if ad.is_undefined_primal(dtable) else None
    gp = None
    if has_pos_table and ad.is_undefined_primal(dpt):
        max_pos = dpt.aval.shape[0]
        gp = segment_sum_rows(ct.astype(dpt.aval.dtype), jnp.clip(pos, 0, max_pos - 1), max_pos, 1.0)
    return [None, None, gt, gp]


def _fwd_jvp(primals, tangents, *, scale, has_pos_table):
    ids, pos, table, pt, inv = primals
    (out,) = embed_fwd_p.bind(*primals, scale=scale, has_pos_table=has_pos_table)
    dtable, dpt = (ad.instantiate_zeros(t) for t in tangents[2:4])
    return (out,), embed_tangent_p.bind(ids, pos, dtable, dpt, scale=scale, has_pos_table=has_pos_table)


def _bwd_jvp(primals, tangents, **params):
    dout, order, sorted_index = primals
    out = embed_bwd_p.bind(*primals, **params)
    return out, embed_bwd_p.bind(ad.instantiate_zeros(tangents[0]), order, sorted_index, **params)


def _bwd_transpose(cts, dout, order, sorted_index, *, rows, scale):
    """The segment sum's transpose: token t = order[i] gets row sorted_index[i] of the cotangent."""
    (ct,) = cts
    if type(ct) is ad.Zero:
        return [None] * 3
    picked = jnp.take(ct, sorted_index, axis=0).astype(jnp.float32) * scale
    return [jnp.zeros(dout.aval.shape, jnp.float32).at[order].set(picked).astype(dout.aval.dtype), None, None]


ad.primitive_jvps[embed_fwd_p] = _fwd_jvp
embed_tangent_p.def_transpose(_tangent_transpose)
ad.primitive_jvps[embed_bwd_p] = _bwd_jvp
ad.primitive_transposes[embed_bwd_p] = _bwd_transpose


def _bwd_batching(args, dims, *, rows, scale):
    """vmap: example e's sorted indices shifted by e * rows and its order by e * N, so the folded
    indices stay sorted and one launch writes every example's [rows, d] gradient."""
    size = next(a.shape[d] for a, d in zip(args, dims) if d is not NOT_MAPPED)
    n = args[1].shape[0] if dims[1] is NOT_MAPPED else int(np.delete(args[1].shape, dims[1])[0])
    if size * max(rows, n) >= 2**31:
        return map_batching(args, dims, prim=embed_bwd_p, rows=rows, scale=scale)
    dout, order, sorted_index = (jnp.broadcast_to(a, (size, *a.shape)) if d is NOT_MAPPED else jnp.moveaxis(a, d, 0)
                                 for a, d in zip(args, dims))
    ex = jnp.arange(size, dtype=jnp.int32)[:, None]
    order = (order + ex * n).reshape(size * n)
    sorted_index = (sorted_index + ex * rows).reshape(size * n)
    (g,) = embed_bwd_p.bind(dout.reshape(size * n, dout.shape[-1]), order, sorted_index, rows=size * rows,
                            scale=scale)
    return [g.reshape(size, rows, g.shape[-1])], [0]


batching.primitive_batchers[embed_bwd_p] = _bwd_batching


# ---- argument checks ----


def _scale(scale, d, fn) -> float:
    if scale is None:
        return math.sqrt(d)
    if isinstance(scale, (bool, np.bool_)) or not isinstance(scale, (int, float, np.integer, np.floating)):
        raise TypeError(f"{fn}: `scale` must be a Python float (static), got {type(scale).__name__}")
    scale = float(scale)
    if not math.isfinite(scale):
        raise ValueError(f"{fn}: `scale` must be finite, got {scale}")
    return scale


def _position(position, shape, fn):
    if isinstance(position, (bool, np.bool_)):
        raise TypeError(f"{fn}: `position` must be an int or an integer array, got a bool")
    if isinstance(position, (int, np.integer)):
        if not _INT32_MIN <= int(position) <= _INT32_MAX:
            raise ValueError(f"{fn}: `position` {int(position)} is outside the int32 range")
        return jnp.asarray(int(position), jnp.int32)
    position = _checks.as_array(position, fn, "position")
    if not jnp.issubdtype(position.dtype, jnp.integer):
        raise TypeError(f"{fn}: `position` must be an int or an integer array, got {np.dtype(position.dtype)} "
                        f"with shape {tuple(position.shape)}")
    try:
        np.broadcast_shapes(tuple(position.shape), tuple(shape))
        ok = np.broadcast_shapes(tuple(position.shape), tuple(shape)) == tuple(shape)
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(f"{fn}: `position` of shape {tuple(position.shape)} does not broadcast to the ids' "
                         f"shape {tuple(shape)}")
    return position
