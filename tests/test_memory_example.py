"""The memory example (examples/transformer_memory.py): with ``memory_efficient=True`` the
compiled gradient step of a pre-LN transformer keeps 2 fewer activations per layer (one per
norm: the block input ``x`` and the mid-block residual ``h``), measured as the slope of the
saving in ``compiled.memory_analysis().temp_size_in_bytes`` over the layer count.

Compiles only (nothing runs), 8 compilations in all; backend-agnostic (CPU or GPU)."""

from __future__ import annotations

import os
import sys

import pytest

import jax
import jax.numpy as jnp

import jaxnorm

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"))
import transformer_memory as tm  # noqa: E402

if jax.default_backend() == "gpu" and not jaxnorm.cuda_built():
    pytest.skip("GPU backend but jaxnorm was built without its CUDA handlers", allow_module_level=True)

SHAPE = dict(batch=4, seq=256, d_model=256)
# Large enough that the peak is the forward/backward turn, whose residuals grow with the layer
# count (at 2 layers XLA:GPU's float32 peak is elsewhere, the same in both modes).
LAYERS = (4, 8)
EXPECTED_PER_LAYER = 2.0  # activations: one per norm, two norms per block


@pytest.mark.parametrize("norm", ["layer_norm", "rms_norm"])
def test_saving_per_layer_is_two_activations(norm):
    slope, saved = tm.per_layer_slope(LAYERS, dtype=jnp.float32, norm=norm, **SHAPE)
    # 10%: fails if the mode saves nothing (0), one activation per layer (1), or costs memory.
    assert slope == pytest.approx(EXPECTED_PER_LAYER, rel=0.1), (norm, saved, slope)
    for n, s in saved.items():
        assert s > 0, (norm, n, saved)
