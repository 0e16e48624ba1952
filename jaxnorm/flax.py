"""Flax linen modules on jaxnorm's kernels: drop-ins for ``flax.linen.LayerNorm``, ``RMSNorm``
and (with the position encoding) ``Embed``.

Each subclasses the flax module, so the constructor, defaults and parameters ("scale", "bias",
"embedding", same shapes and initializers) are flax's own: a checkpoint of the flax module loads
unchanged. The norms add ``memory_efficient`` (see ``jaxnorm.layer_norm``). Needs
``pip install 'jaxnorm[flax]'``.

Output dtypes follow flax: ``dtype``, else the promotion of x and the parameters (float32 for
bfloat16 x with float32 parameters); the kernel computes in float32 and rounds once to it.
Unsupported flax options raise (``NotImplementedError``) rather than compute something else:
non-trailing ``reduction_axes``, ``feature_axes`` outside them, ``axis_name``,
``axis_index_groups``, ``mask``, ``force_float32_reductions=False``. ``use_fast_variance`` has
no effect: the kernel's variance is the stable two-pass one either way.
"""

from __future__ import annotations

from jaxnorm._modules import flax_norm, flax_param_shape, require
from jaxnorm.embedding import embed_with_position

require("flax", "flax")
from flax import linen as nn  # noqa: E402
from flax.linen.dtypes import canonicalize_dtype  # noqa: E402


class LayerNorm(nn.LayerNorm):
    """``flax.linen.LayerNorm`` as one jaxnorm kernel, plus ``memory_efficient``."""

    memory_efficient: bool = False

    @nn.compact
    def __call__(self, x, *, mask=None):
        return _norm(self, x, mask, use_bias=self.use_bias, centered=True)


class RMSNorm(nn.RMSNorm):
    """``flax.linen.RMSNorm`` as one jaxnorm kernel, plus ``memory_efficient``."""

    memory_efficient: bool = False

    @nn.compact
    def __call__(self, x, *, mask=None):
        return _norm(self, x, mask, use_bias=False, centered=False)


def _norm(module, x, mask, *, use_bias, centered):
    fn = f"jaxnorm.flax.{type(module).__name__}"
    if not module.force_float32_reductions:
        raise NotImplementedError(f"{fn}: `force_float32_reductions=False` is not supported: the kernel "
                                  "always reduces in float32")
    shape = flax_param_shape(fn, x.shape, module.feature_axes)
    scale = module.param("scale", module.scale_init, shape, module.param_dtype) if module.use_scale else None
    bias = module.param("bias", module.bias_init, shape, module.param_dtype) if use_bias else None
    out_dtype = canonicalize_dtype(x, scale, bias, dtype=module.dtype)
    return flax_norm(module, fn, x, scale, bias, mask, centered=centered, out_dtype=out_dtype)


class EmbedWithPosition(nn.Embed):
    """``flax.linen.Embed`` whose call also scales the rows and adds the position encoding, fused:
    ``jaxnorm.embed_with_position(inputs, embedding, position=position, scale=scale)``, i.e.
    ``Embed(inputs) * scale + PE(position)`` (``scale`` default ``sqrt(features)``; the sinusoidal
    encoding of tensor2tensor: first half sines, second half cosines).

    The parameter is Embed's ("embedding", ``(num_embeddings, features)``, same initializer), so an
    Embed checkpoint loads. ``attend`` is Embed's. Differences: ids out of range are clamped (Embed
    gives NaN); the float32 result is rounded to ``param_dtype`` then cast to ``dtype`` (Embed casts
    the table to ``dtype`` first, which here would copy the whole table on every call), so
    ``promote_dtype`` applies to ``attend`` only.
    """

    scale: float | None = None

    def __call__(self, inputs, *, position):
        out = embed_with_position(inputs, self.embedding, position=position, scale=self.scale)
        return out.astype(self.dtype or out.dtype)
