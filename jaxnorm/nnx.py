"""Flax NNX modules on jaxnorm's kernels: drop-ins for ``flax.nnx.LayerNorm``, ``RMSNorm`` and
(with the position encoding) ``Embed``.

Each subclasses the nnx module, so the constructor (``num_features``, ``rngs``, ...), defaults
and parameters are nnx's own: ``nnx.state`` of one loads into the other (``nnx.update``). The
norms take ``memory_efficient=`` too (see ``jaxnorm.layer_norm``). Needs
``pip install 'jaxnorm[flax]'``.

Dtypes follow nnx: x and the parameters go through ``promote_dtype`` with ``dtype`` first; the
kernel computes in float32 and rounds once. Unsupported options raise (``NotImplementedError``):
non-trailing ``reduction_axes``, ``feature_axes`` outside them, ``axis_name``,
``axis_index_groups``, ``mask``. ``use_fast_variance`` has no effect (the kernel's variance is
the stable two-pass one either way).
"""

from __future__ import annotations

from jaxnorm._modules import flax_norm, require
from jaxnorm.embedding import embed_with_position

require("flax", "flax")
from flax import nnx  # noqa: E402
from flax.nnx.nn.dtypes import canonicalize_dtype  # noqa: E402


class LayerNorm(nnx.LayerNorm):
    """``flax.nnx.LayerNorm`` as one jaxnorm kernel, plus ``memory_efficient``."""

    def __init__(self, num_features, *, memory_efficient=False, **kwargs):
        super().__init__(num_features, **kwargs)
        self.memory_efficient = memory_efficient

    def __call__(self, x, *, mask=None):
        x, scale, bias = self.promote_dtype((x, _value(self.scale), _value(self.bias)), dtype=self.dtype)
        return _norm(self, x, scale, bias, mask, centered=True)


class RMSNorm(nnx.RMSNorm):
    """``flax.nnx.RMSNorm`` as one jaxnorm kernel, plus ``memory_efficient``."""

    def __init__(self, num_features, *, memory_efficient=False, **kwargs):
        super().__init__(num_features, **kwargs)
        self.memory_efficient = memory_efficient

    def __call__(self, x, mask=None):
        x, scale = self.promote_dtype((x, _value(self.scale)), dtype=self.dtype)
        return _norm(self, x, scale, None, mask, centered=False)


def _value(param):
    return None if param is None else param[...]


def _norm(module, x, scale, bias, mask, *, centered):
    fn = f"jaxnorm.nnx.{type(module).__name__}"
    out_dtype = canonicalize_dtype(x, scale, bias, dtype=module.dtype)
    return flax_norm(module, fn, x, scale, bias, mask, centered=centered, out_dtype=out_dtype)


class EmbedWithPosition(nnx.Embed):
    """``flax.nnx.Embed`` whose call also scales the rows and adds the position encoding, fused:
    ``Embed(inputs) * scale + PE(position)`` by ``jaxnorm.embed_with_position`` (``scale``
    default ``sqrt(features)``). Same parameter as Embed; ``attend`` is Embed's. As with
    ``jaxnorm.flax.EmbedWithPosition``: ids are clamped, and the result is computed from the
    ``param_dtype`` table then cast to ``dtype`` (``promote_dtype`` applies to ``attend`` only).
    """

    def __init__(self, num_embeddings, features, *, scale=None, **kwargs):
        super().__init__(num_embeddings, features, **kwargs)
        self.scale = scale

    def __call__(self, inputs, *, position):
        out = embed_with_position(inputs, self.embedding[...], position=position, scale=self.scale)
        return out.astype(self.dtype)
