"""jaxnorm: fused LayerNorm, RMSNorm, softmax and log-softmax, and sort-free token sampling, for JAX,
as XLA FFI custom calls with CPU and CUDA kernels."""

from jaxnorm import reference
from jaxnorm._ffi import cuda_built
from jaxnorm.norm import layer_norm, rms_norm
from jaxnorm.sampling import filter_logits, sample, top_k
from jaxnorm.softmax import log_softmax, softmax

__version__ = "0.1.0"

__all__ = [
    "layer_norm", "rms_norm", "softmax", "log_softmax", "sample", "filter_logits", "top_k", "reference",
    "cuda_built", "__version__",
]
