"""Equinox modules on jaxnorm's kernels: drop-ins for ``equinox.nn.LayerNorm``, ``RMSNorm`` and
``Embedding``.

Each subclasses the Equinox module, so the constructor (``shape``, ``eps``, ``use_weight``,
``use_bias``, ``dtype``) and the leaves (``weight``, ``bias``) are Equinox's own: a serialised
Equinox module loads into the jaxnorm one (``eqx.tree_deserialise_leaves``) and back. They add
``memory_efficient=`` (see ``jaxnorm.layer_norm``). Like Equinox's, a module normalizes one
example, ``x.shape == shape``; ``jax.vmap`` it over a batch (the kernel folds the batch into
its rows: one launch). Needs ``pip install 'jaxnorm[equinox]'``.

Arithmetic as Equinox's: float32 statistics and affine, the result in x's dtype. RMSNorm's bias
(``use_bias=True`` is Equinox's default) is added by the same kernel.

``EmbedWithPosition`` is ``equinox.nn.Embedding`` (its ``weight`` leaf) whose call scales the
row and adds the position encoding in one kernel; vmapped over tokens, the lookups fold into one
launch, and so does the table gradient (one sorted segment sum, no per-token tables).
"""

from __future__ import annotations

from jaxnorm._modules import norm, require
from jaxnorm.embedding import embed_with_position

require("equinox", "equinox")
import equinox as eqx  # noqa: E402

_NO_STATE = object()


class LayerNorm(eqx.nn.LayerNorm):
    """``equinox.nn.LayerNorm`` as one jaxnorm kernel, plus ``memory_efficient``."""

    memory_efficient: bool = eqx.field(static=True, default=False)

    def __init__(self, *args, memory_efficient=False, **kwargs):
        super().__init__(*args, **kwargs)
        self.memory_efficient = memory_efficient

    def __call__(self, x, state=_NO_STATE, *, key=None):
        """``state`` is passed through and ``key`` ignored, as by Equinox."""
        return _norm(self, x, state, centered=True)


class RMSNorm(eqx.nn.RMSNorm):
    """``equinox.nn.RMSNorm`` as one jaxnorm kernel, plus ``memory_efficient``."""

    memory_efficient: bool = eqx.field(static=True, default=False)

    def __init__(self, *args, memory_efficient=False, **kwargs):
        super().__init__(*args, **kwargs)
        self.memory_efficient = memory_efficient

    def __call__(self, x, state=_NO_STATE, *, key=None):
        """``state`` is passed through and ``key`` ignored, as by Equinox."""
        return _norm(self, x, state, centered=False)


def _norm(module, x, state, *, centered):
    fn = f"jaxnorm.equinox.{type(module).__name__}"
    if x.shape != module.shape:
        raise ValueError(f"{fn}: x must have the module's shape {module.shape}, got {x.shape}; "
                         "for a batch, jax.vmap the module")
    y = norm(fn, x, module.weight, module.bias, k=x.ndim, epsilon=module.eps, out_dtype=x.dtype,
             memory_efficient=module.memory_efficient, centered=centered)
    return y if state is _NO_STATE else (y, state)


class EmbedWithPosition(eqx.nn.Embedding):
    """``equinox.nn.Embedding`` whose call is ``weight[x] * scale + PE(position)``, fused
    (``jaxnorm.embed_with_position``; ``scale`` default ``sqrt(embedding_size)``). Like Equinox's,
    ``x`` is one index; ids out of range are clamped (Equinox's lookup clamps too)."""

    scale: float | None = eqx.field(static=True, default=None)

    def __init__(self, *args, scale=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.scale = scale

    def __call__(self, x, *, position, key=None):
        """``key`` is ignored, as by Equinox."""
        if getattr(x, "shape", None) != ():
            raise ValueError("jaxnorm.equinox.EmbedWithPosition: x must be one index (a scalar integer array); "
                             f"got shape {getattr(x, 'shape', type(x).__name__)}: jax.vmap the module over tokens")
        return embed_with_position(x, self.weight, position=position, scale=self.scale)
