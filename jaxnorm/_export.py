"""Support for ``jax.export``: the safety checks to disable for jaxnorm's custom calls, and the
version of the FFI targets they name.

``jax.export`` refuses to serialize a custom call unless JAX itself guarantees the target stable,
or the caller disables that check for the target. jaxnorm takes on the guarantee for its own
targets (the policy in the README's "Export" section, pinned by tests/ffi_targets.json), so it
hands out the checks: disabling them is safe for jaxnorm's targets and for no other.
"""

from __future__ import annotations

from jax import export as jax_export

from jaxnorm._ops import TARGETS

# Raised whenever the set of targets changes: one added, one given a versioned successor
# ("jaxnorm_norm_fwd_v2"), or a retired one removed. An artifact exported at version V runs on
# any jaxnorm of version >= V that still registers all of its targets (the README lists
# retirements); a serving system can record this number next to its artifacts.
FFI_API_VERSION = 7  # 2: jaxnorm_linear_attention, jaxnorm_linear_attention_rank1;
# 3: jaxnorm_cross_entropy_fwd, jaxnorm_cross_entropy_bwd;
# 4: jaxnorm_cross_entropy_fwd_v2 (a workspace result; supersedes jaxnorm_cross_entropy_fwd),
#    jaxnorm_add_norm_fwd, jaxnorm_add_norm_bwd, jaxnorm_sample_v2 and jaxnorm_filter_v2 (the output
#    bias, finished rows and end_id of the decoding loop's logits update; supersede jaxnorm_sample
#    and jaxnorm_filter); 5: jaxnorm_sample_with_top_k (sample_v2's signature and meaning, for
#    calls with top_k: its CUDA handler may take the one-read top-k kernel); 6:
#    jaxnorm_sample_by_mass (sample_v2's signature with top_k and top_p absent, for calls with
#    neither: its CUDA handler may hold rows in registers); 7: jaxnorm_cross_entropy_fwd_grad (the
#    reduced losses' forward and gradient in one). Superseded targets stay registered.


def export_checks() -> tuple[jax_export.DisabledSafetyCheck, ...]:
    """The ``jax.export`` safety checks to disable so that a function using jaxnorm serializes::

        exported = jax.export.export(jax.jit(fn), disabled_checks=jaxnorm.export_checks())(*args)
        blob = exported.serialize()

    One ``DisabledSafetyCheck.custom_call`` per jaxnorm FFI target (the same names on every
    platform; add your own checks to the tuple if other libraries need some). The process that
    deserializes and calls the artifact must ``import jaxnorm`` first: importing registers the
    handlers with XLA, without which compiling the artifact fails with "No FFI handler registered
    for jaxnorm_...".

    ``platforms=("cpu", "cuda")`` lowers for a GPU without one being present, but needs the CUDA
    handlers built into this installation (``jaxnorm.cuda_built()``); without them the export
    raises ``RuntimeError`` saying so.
    """
    return tuple(jax_export.DisabledSafetyCheck.custom_call(name) for name in TARGETS)
