"""Token sampling without sorting: temperature, top-k, top-p, min-p, and a fast ``top_k``.

The conventions (``jaxnorm.reference.sampling_mask`` is the written spec):

- Logits are divided by ``temperature``; ``temperature=0`` (any value <= 0) is greedy: the argmax,
  the lowest index on ties, and the filters are ignored. A temperature above 2^126 (``inf``
  included) acts as 2^126: uniform over the finite logits, to float32's resolution.
- Filters apply in this order: **top-k, then top-p within the top-k set, then min-p**.
  - top-k keeps every token whose logit is >= the k-th largest (ties with it are all kept).
  - top-p keeps token i while the probability mass of the tokens with strictly larger logits
    (renormalized within the top-k set) is below ``top_p``: the smallest set of top tokens whose
    mass reaches ``top_p``, plus ties. The most likely token is always kept.
  - min-p keeps tokens whose probability is >= ``min_p`` times the largest probability.
- NaN logits are never drawn (as ``-inf``). If a row's maximum is ``+inf``, its ``+inf`` tokens
  share all the mass equally. A row with no finite-probability token (all ``-inf``/NaN) returns
  token ``-1``.
- The decoding loop's logits update rides on the same read (FasterTransformer's "update logits"):
  ``bias`` (a [vocab] vector) is added to every row's logits in float32 before anything else, so
  ``sample(key, x, bias=b)`` draws exactly what ``sample(key, x.astype(float32) + b.astype(float32))``
  draws, bit for bit; a row whose ``finished`` flag is set returns its ``end_id`` without reading
  its logits or drawing (its token depends on nothing else), and leaves the other rows' tokens as
  they are without ``finished``.
- Per-row parameter arrays are not checked at trace time; their values are clamped: ``top_k``
  outside ``[1, vocab)`` is off, ``top_p >= 1`` (or NaN) is off, ``top_p <= 0`` keeps only the top
  token(s), ``min_p <= 0`` is off, ``min_p >= 1`` keeps only the top token(s); integer arrays wider
  than int32 are clamped to its range first, never wrapped. Python scalars are checked and
  out-of-range values raise (a ``top_k`` at or above the vocabulary is allowed: it keeps every
  token).

Randomness: drawn inside the kernel by a counter-based generator, Philox-4x32-10, keyed by the
JAX key's data (a wider key's words, as rbg's four, mixed into Philox's two), with the token index
or the draw round (and, for a single key shared by the batch, the row index) as its counter. Masses are exp(s), s = (logit - max) / temperature, in 2^-38 fixed
point rounded to the nearest integer (a token below 2^-39 of the largest probability weighs 0 and
is never drawn: at most vocab * 2^-39 of the mass, 2.3e-7 at 128256 tokens), summed exactly.

- Rows without top-k or top-p (no filter, or min-p alone) draw by inverse transform: a 64-bit
  Philox word of the row (counter ``(0, row index, tag, 1)``) times the kept tokens' total mass,
  over 2^64, is a position in their masses in index order, and the token there is drawn.
- Rows with top-k (or top-p with min-p) draw the argmax of ``logit / temperature + Gumbel noise``
  over the kept tokens (the Gumbel-max trick, an exact sampler of the renormalized distribution),
  the noise -ln(-ln u) of a uniform from the token's Philox word.
- Top-p alone (no top-k, no min-p) draws by inverse transform with value bins 1/8 wide in s and
  top-p's crossing bin B (every token above it is kept). Round r's word (counter ``(r, row index,
  tag, 1)``) times the mass of the bins >= B, over 2^64, is a position in the tokens ordered by bin
  (descending), then index; a token above B is drawn, one in B is kept if the mass of the strictly
  larger values is below top-p's target, else the next round draws among B's tokens above it
  (rejection sampling from sets that hold the kept set: exact); after 4 rejected rounds the Gumbel
  rule decides.

Hence the same key and logits give the same token, run to run, on any batch composition when every
row has its own key; CPU and GPU draw the same words and the same rounds (their exp and log round
differently, which can move a draw only at a token's edge). The kernels read the logits once, hold
each row in the shared memory of a thread-block cluster, and find the top-k/top-p thresholds on
those copies:
a histogram locates the threshold's bin, the tokens at or above it are gathered and sorted in one
CTA (radix select where they would not fit), with masses summed in 64-bit fixed point (exact,
order-independent): no sort of the vocabulary, no atomics that change results. With ``top_k``,
where rows queue for the GPU or rows are long, a kernel that copies nothing first keeps, as each
CTA streams its part of the row, only the tokens near the top, and resolves from those: the same
thresholds and tokens (``JAXNORM_SAMPLING_ONE_READ=0``/``1`` turns it off or forces it).

Forward only: none of these ops has a gradient, except ``top_k``'s values (like ``lax.top_k``).
"""

from __future__ import annotations

import math

import numpy as np

import jax
import jax.numpy as jnp

from jaxnorm import _checks
from jaxnorm._ops import filter_p, sample_by_mass_p, sample_p, sample_with_top_k_p, top_k_p
from jaxnorm._partition import as_rows, gathered
from jaxnorm._primitive import empty_placeholder

# The longest rows sample and filter_logits take: 2^25 masses of at most 2^38 sum within 64 bits.
MAX_VOCAB = 1 << 25

# The largest k the top_k kernel takes (its candidates are sorted in one CTA's shared memory).
TOP_K_MAX = 2048


def sample(key, logits, *, temperature=1.0, top_k=None, top_p=None, min_p=None, axis=-1, bias=None,
           finished=None, end_id=None):
    """Draws one token per row of ``logits`` from the filtered, temperature-scaled softmax.

    Equivalent in distribution to (``jaxnorm.reference.sample``)::

        x = logits.astype(float32) + bias.astype(float32)   # with a bias; else logits
        keep = reference.sampling_mask(x, temperature=..., top_k=..., top_p=..., min_p=...)
        tokens = jax.random.categorical(key, jnp.where(keep, x / temperature, -jnp.inf))
        tokens = jnp.where(finished, end_id, tokens)          # with finished

    Args:
      key: a PRNG key (``jax.random.key``) or a raw ``uint32`` key (``jax.random.PRNGKey``): one
        key for the whole batch, or one per row (shape = ``logits.shape`` without ``axis``). With
        one key per row, each row's token depends only on its own key and logits.
      logits: float32, bfloat16 or float16, any leading shape; at most 2^25 (``MAX_VOCAB``) tokens on
        ``axis``.
      temperature: Python scalar >= 0, or an array with one value per row; 0 means greedy.
      top_k: int >= 0 (0 or None: off; >= vocab keeps every token), or an int array with one value
        per row.
      top_p: float in (0, 1] (None or 1: off), or an array with one value per row.
      min_p: float in [0, 1] (None or 0: off), or an array with one value per row.
      axis: the vocabulary axis.
      bias: None, or a float32/bfloat16/float16 array of shape ``(vocab,)`` (the output
        projection's bias), added to every row's logits in float32 before the temperature and the
        filters. The kernels add it as they read the logits (no pass of its own; a 16-bit bias is
        converted to float32 first, a [vocab] conversion).
      finished: None, or a bool array of the batch shape (or broadcasting to it): the sequences
        that have ended. A finished row returns its ``end_id`` without reading its logits or
        drawing, so its token depends on neither the key nor the logits nor the parameters; the
        other rows draw exactly the tokens they draw without ``finished``.
      end_id: with ``finished`` (and only with it): a Python int in ``[0, vocab)`` (checked), or
        an int array with one value per row. A numpy array's values are known at trace time and
        checked like the int's; a jax array's are not: a finished row returns its end_id as given,
        even outside ``[0, vocab)`` (-1 included).

    Returns:
      int32 token ids, of shape ``logits.shape`` without ``axis`` (-1 for an unfinished row with no
      token of positive probability).
    """
    fn = "sample"
    x, batch = _logits_rows(logits, axis, fn)
    keys = _key_rows(key, batch, fn)
    temps = _per_row(temperature, batch, fn, "temperature", 1.0, jnp.float32, _check_temperature)
    k, p, lmp = _filters(top_k, top_p, min_p, batch, x.shape[1], fn)
    b = jax.lax.stop_gradient(_bias(bias, logits, x.shape[1], fn))  # tokens: no gradient
    fin, eid = _finished(finished, end_id, batch, x.shape[1], fn)
    if x.shape[0] == 0:
        return jnp.zeros(batch, jnp.int32)
    # Calls that give top_k (other than a Python 0) lower to the target whose CUDA handler may take
    # the one-read top-k kernel; calls with neither top_k nor top_p to the one without those
    # operands, whose CUDA handler may hold rows in registers (every row's kept set follows from its
    # maximum); the rest (top-p) to sample_v2. The same tokens on every target. Integer tokens: no
    # gradient.
    with_k = not _off(top_k, 0)
    if with_k:
        (tokens,) = sample_with_top_k_p.bind(jax.lax.stop_gradient(x), keys, temps, k, p, lmp, b, fin, eid)
    elif _off(top_p, 1.0):
        none_i, none_f = empty_placeholder(jnp.int32), empty_placeholder(jnp.float32)
        (tokens,) = sample_by_mass_p.bind(jax.lax.stop_gradient(x), keys, temps, none_i, none_f, lmp, b, fin, eid)
    else:
        (tokens,) = sample_p.bind(jax.lax.stop_gradient(x), keys, temps, k, p, lmp, b, fin, eid)
    return tokens.reshape(batch)


def filter_logits(logits, *, top_k=None, top_p=None, min_p=None, axis=-1, bias=None):
    """``logits`` (plus ``bias``) with every token outside top-k, then top-p, then min-p set to ``-inf``.

    For users who sample themselves: ``jax.random.categorical(key, filter_logits(x / t, ...))``
    draws from exactly the distribution ``sample(key, x, temperature=t, ...)`` draws from.
    Equivalent to ``jnp.where(reference.sampling_mask(logits, ...), logits, -jnp.inf)`` (NaN
    logits become ``-inf``; ``reference.filter_logits``). Arguments as in ``sample``; the same
    dtype and shape come back. With a ``bias``, the filters select on ``logits + bias`` in float32
    (as ``sample`` does) and the kept entries are that sum rounded to the logits' dtype (exact for
    float32 logits).
    """
    fn = "filter_logits"
    x, batch = _logits_rows(logits, axis, fn)
    k, p, lmp = _filters(top_k, top_p, min_p, batch, x.shape[1], fn)
    b = _bias(bias, logits, x.shape[1], fn)
    if x.shape[0] == 0:
        return logits
    (y,) = filter_p.bind(x, k, p, lmp, b)
    return jnp.moveaxis(y.reshape(*batch, x.shape[1]), -1, _axis(logits, axis, fn))


def top_k(operand, k, *, axis=-1):
    """The ``k`` largest entries along ``axis`` and their indices: a drop-in for ``lax.top_k``.

    Same order and tie rule: values in descending order, equal values by ascending index; NaN
    sorts above ``+inf`` (and ``-NaN`` below ``-inf``), ``-0`` below ``+0``, like ``lax.top_k``.
    Differentiable in the values (the gradient flows to the selected entries). One radix select
    over each row held in a cluster's shared memory, then a sort of the k winners. ``k`` above
    ``TOP_K_MAX`` (2048) is computed by ``lax.top_k`` instead, as this docstring says.

    Returns:
      (values, indices): values of ``operand``'s dtype, int32 indices, both of ``operand``'s shape
      with ``axis`` of size ``k``.
    """
    fn = "top_k"
    operand = _checks.as_array(operand, fn, "operand")
    _checks.check_input_dtype(operand, fn, "operand")
    if operand.ndim == 0:
        raise ValueError(f"{fn}: `operand` must have at least one axis, got a scalar")
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        raise TypeError(f"{fn}: `axis` must be an int, got {axis!r}")
    if not -operand.ndim <= axis < operand.ndim:
        raise ValueError(f"{fn}: axis {axis} is out of range for `operand` of shape {tuple(operand.shape)}")
    axis = int(axis) % operand.ndim
    cols = operand.shape[axis]
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise TypeError(f"{fn}: `k` must be a Python int, got {type(k).__name__}")
    k = int(k)
    if not 0 <= k <= cols:
        raise ValueError(f"{fn}: `k` must lie in [0, {cols}] (axis {axis} of shape {tuple(operand.shape)}), got {k}")
    if axis != operand.ndim - 1:
        values, idx = top_k(jnp.moveaxis(operand, axis, -1), k)
        return jnp.moveaxis(values, -1, axis), jnp.moveaxis(idx, -1, axis)
    if k > TOP_K_MAX:
        return jax.lax.top_k(operand, k)
    lead = operand.shape[:-1]
    rows = math.prod(lead)
    if rows == 0 or k == 0:
        return jnp.zeros((*lead, k), operand.dtype), jnp.zeros((*lead, k), jnp.int32)
    # Indices carry no gradient; the values' gradient flows through the gather below, which
    # needs whole rows on each device (the kernel gathers them anyway).
    operand = gathered(operand, (-1,))
    (idx,) = top_k_p.bind(as_rows(jax.lax.stop_gradient(operand), 1), k=k)
    idx = idx.reshape(*lead, k)
    return jnp.take_along_axis(operand, idx, axis=-1), idx


# ----------------------------------------------------------------------------------------------
# Argument handling


def _axis(logits, axis, fn):
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        raise TypeError(f"{fn}: `axis` must be an int, got {axis!r}")
    if logits.ndim == 0:
        raise ValueError(f"{fn}: `logits` must have a vocabulary axis, got a scalar")
    if not -logits.ndim <= axis < logits.ndim:
        raise ValueError(f"{fn}: axis {axis} is out of range for logits of shape {tuple(logits.shape)}")
    return int(axis) % logits.ndim


def _logits_rows(logits, axis, fn):
    """logits as (rows, vocab), and the batch shape (logits' shape without `axis`)."""
    logits = _checks.as_array(logits, fn, "logits")
    _checks.check_input_dtype(logits, fn, "logits")
    a = _axis(logits, axis, fn)
    x = jnp.moveaxis(logits, a, -1)
    batch = tuple(x.shape[:-1])
    if x.shape[-1] == 0:
        raise ValueError(f"{fn}: `logits` of shape {tuple(logits.shape)} has an empty vocabulary axis {a}")
    if x.shape[-1] > MAX_VOCAB:
        raise ValueError(f"{fn}: `logits` of shape {tuple(logits.shape)} has {x.shape[-1]} tokens on axis {a}; "
                         f"sampling and its filters take at most 2^25 (their 64-bit sums of 2^38-unit masses)")
    return as_rows(x, 1), batch


_KEY_WIDTHS = (2, 4)  # threefry's raw key data, rbg's and unsafe_rbg's
_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1


def _key_rows(key, batch, fn):
    """The key data as (1, W) for one key or (rows, W) for one key per row, uint32."""
    if key is None or not hasattr(key, "dtype"):
        raise TypeError(
            f"{fn}: `key` must be a PRNG key (jax.random.key) or a raw uint32 key (jax.random.PRNGKey), "
            f"got {type(key).__name__}"
        )
    if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        kshape, data = tuple(key.shape), jax.random.key_data(key)
    elif np.dtype(key.dtype) == np.uint32 and key.ndim >= 1:
        kshape, data = tuple(key.shape[:-1]), key
    else:
        raise TypeError(
            f"{fn}: `key` must be a PRNG key (jax.random.key) or a raw uint32 key (jax.random.PRNGKey), "
            f"got dtype {key.dtype} with shape {tuple(key.shape)}"
        )
    width = data.shape[-1]
    if width not in _KEY_WIDTHS and not jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        raise ValueError(
            f"{fn}: a raw uint32 `key` must hold {' or '.join(map(str, _KEY_WIDTHS))} words on its last axis "
            f"(jax.random.PRNGKey's, or jax.random.key_data of an rbg key), got shape {tuple(key.shape)}"
        )
    if kshape == ():
        return data.reshape(1, width).astype(jnp.uint32)
    if kshape == batch:
        return as_rows(data, 1).astype(jnp.uint32)
    raise ValueError(
        f"{fn}: `key` must be one key or one key per row (key shape {batch}), got keys of shape {kshape}"
    )


def _off(value, off):
    """Whether a filter argument is statically off: None, or the Python number that means off."""
    return value is None or (isinstance(value, (int, float, np.integer, np.floating))
                             and not isinstance(value, (bool, np.bool_)) and value == off)


def _per_row(value, batch, fn, name, default, dtype, check):
    """A per-row parameter as a grouped operand: (1,) for a scalar, (rows,) for an array."""
    if value is None:
        value = default
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{fn}: `{name}` must be a number or an array, got a bool")
    if isinstance(value, (int, float, np.integer, np.floating)):
        check(value, fn, name)
        if dtype == jnp.int32:  # a checked int past int32 (top_k >= vocab) means what int32's largest does
            value = min(max(int(value), _INT32_MIN), _INT32_MAX)
        return jnp.full((1,), value, dtype)
    value = _checks.as_array(value, fn, name)
    want = jnp.integer if dtype == jnp.int32 else jnp.floating
    if not jnp.issubdtype(value.dtype, want) and not (want is jnp.floating and jnp.issubdtype(value.dtype, jnp.integer)):
        raise TypeError(f"{fn}: `{name}` must be {'an integer' if want is jnp.integer else 'a float'} array, got {value.dtype}")
    if dtype == jnp.int32:
        return _grouped(_checks.int32_clamped(value, _INT32_MIN, _INT32_MAX), batch, fn, name)
    return _grouped(value.astype(dtype), batch, fn, name)


def _grouped(value, batch, fn, name):
    """An array that is a scalar or broadcasts to the batch shape, as (1,) or (rows,)."""
    try:
        ok = np.broadcast_shapes(tuple(value.shape), batch) == batch
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(
            f"{fn}: `{name}` of shape {tuple(value.shape)} must be a scalar or broadcast to the batch shape {batch}"
        )
    if value.size == 1:
        return value.reshape(1)
    return as_rows(jnp.broadcast_to(value, batch), 0)


def _check_temperature(t, fn, name):
    if not t >= 0:
        raise ValueError(f"{fn}: `{name}` must be >= 0 (0 is greedy), got {t}")


def _check_top_k(k, fn, name):
    if not isinstance(k, (int, np.integer)):
        raise TypeError(f"{fn}: `{name}` must be an int, got {k!r}")
    if k < 0:
        raise ValueError(f"{fn}: `{name}` must be >= 0 (0 is off), got {k}")


def _check_top_p(p, fn, name):
    if not 0 < p <= 1:
        raise ValueError(f"{fn}: `{name}` must lie in (0, 1], got {p}")


def _check_min_p(p, fn, name):
    if not 0 <= p <= 1:
        raise ValueError(f"{fn}: `{name}` must lie in [0, 1], got {p}")


def _bias(bias, logits, vocab, fn):
    """The output bias as the kernels' (vocab,) float32 operand, or the absent placeholder."""
    if bias is None:
        return empty_placeholder(jnp.float32)
    bias = _checks.as_array(bias, fn, "bias")
    _checks.check_input_dtype(bias, fn, "bias")
    if tuple(bias.shape) != (vocab,):
        raise ValueError(
            f"{fn}: `bias` must have shape ({vocab},), the vocabulary axis of `logits` of shape "
            f"{tuple(logits.shape)}, got {tuple(bias.shape)}"
        )
    # No stop_gradient here: filter_logits' output holds logits + bias, so differentiating it by
    # the bias must raise as by the logits (no JVP rule), not give a silent 0 (`sample` stops it).
    return bias.astype(jnp.float32)


def _finished(finished, end_id, batch, vocab, fn):
    """(finished, end_id) as grouped operands (bool, int32), or the absent placeholders."""
    if finished is None and end_id is None:
        return empty_placeholder(jnp.bool_), empty_placeholder(jnp.int32)
    if finished is None or end_id is None:
        given, missing = ("end_id", "finished") if finished is None else ("finished", "end_id")
        raise ValueError(f"{fn}: `{given}` needs `{missing}`: pass both (a finished row returns its end_id)")
    finished = _checks.as_array(finished, fn, "finished")
    if np.dtype(finished.dtype) != np.bool_:
        raise TypeError(
            f"{fn}: `finished` must be a bool array, got {np.dtype(finished.dtype)} with shape {tuple(finished.shape)}"
        )
    fin = _grouped(finished, batch, fn, "finished")

    def check_end_id(e, fn, name):
        if not isinstance(e, (int, np.integer)):
            raise TypeError(f"{fn}: `{name}` must be an int or an int array, got {e!r}")
        if not 0 <= e < vocab:
            raise ValueError(f"{fn}: `{name}` must lie in [0, {vocab}) (the vocabulary of `logits`), got {e}")

    if isinstance(end_id, np.ndarray) and np.issubdtype(end_id.dtype, np.integer) and end_id.size:
        # host values are static: checked like a Python int (a jax array is not: it may be traced)
        check_end_id(int(end_id.min()), fn, "end_id")
        check_end_id(int(end_id.max()), fn, "end_id")
    return fin, _per_row(end_id, batch, fn, "end_id", None, jnp.int32, check_end_id)


def _filters(top_k, top_p, min_p, batch, vocab, fn):
    k = _per_row(top_k, batch, fn, "top_k", 0, jnp.int32, _check_top_k)
    p = _per_row(top_p, batch, fn, "top_p", 1.0, jnp.float32, _check_top_p)
    m = _per_row(min_p, batch, fn, "min_p", 0.0, jnp.float32, _check_min_p)
    return k, p, jnp.log(m)  # the kernels compare (logit - max) / temperature with log(min_p)
