"""jaxnorm: fused LayerNorm, RMSNorm, softmax and log-softmax, softmax cross-entropy, sort-free token sampling, and
padding removal for padding-free transformer layers, decode attention over a KV cache, causal linear attention, for JAX, as XLA FFI custom calls with CPU and
CUDA kernels."""

from jaxnorm import reference
from jaxnorm._export import FFI_API_VERSION, export_checks
from jaxnorm._ffi import cuda_built
from jaxnorm.cross_entropy import softmax_cross_entropy
from jaxnorm.decode import decode_attention
from jaxnorm.embedding import embed_with_position
from jaxnorm.linear_attention import linear_attention, linear_attention_step
from jaxnorm.norm import layer_norm, rms_norm
from jaxnorm.padding import (
    PaddingOffsets, add_qkv_bias_rebuild_padding, check_capacity, padding_offsets, rebuild_padding,
    remove_padding, transpose_remove_padding,
)
from jaxnorm.sampling import filter_logits, sample, top_k
from jaxnorm.softmax import log_softmax, softmax

__version__ = "0.1.0"

__all__ = [
    "layer_norm", "rms_norm", "softmax", "log_softmax", "softmax_cross_entropy", "sample", "filter_logits", "top_k", "reference",
    "PaddingOffsets", "padding_offsets", "remove_padding", "rebuild_padding", "add_qkv_bias_rebuild_padding",
    "transpose_remove_padding", "check_capacity", "decode_attention", "embed_with_position", "linear_attention",
    "linear_attention_step", "cuda_built",
    "export_checks", "FFI_API_VERSION", "__version__",
]
