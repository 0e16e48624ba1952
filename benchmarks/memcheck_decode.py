"""Runs decode_attention once per case (no pytest, no reference) so that compute-sanitizer's
memcheck finishes in a GPU call: the split path, appends at the first and last slot, invalid and
zero lengths, grouped and multi-query heads, every head_dim, both layouts, float32 and bfloat16.

    compute-sanitizer --tool memcheck python benchmarks/memcheck_decode.py
"""

import numpy as np

import jax
import jax.numpy as jnp

import jaxnorm

CASES = [  # batch, q_heads, kv_heads, max_len, head_dim, dtype, layout
    (3, 4, 1, 1100, 128, "bfloat16", "BHLD"),
    (2, 12, 1, 333, 64, "float16", "BLHD"),
    (2, 16, 2, 70, 256, "bfloat16", "BHLD"),
    (3, 8, 2, 129, 128, "float32", "BHLD"),
    (2, 8, 8, 37, 64, "float32", "BLHD"),
]


def main():
    rng = np.random.default_rng(0)
    for batch, hq, hkv, max_len, d, dtype, layout in CASES:
        shape = (batch, hkv, max_len, d) if layout == "BHLD" else (batch, max_len, hkv, d)
        q = jnp.asarray(rng.normal(size=(batch, hq, d)), dtype)
        k = jnp.asarray(rng.normal(size=shape), dtype)
        v = jnp.asarray(rng.normal(size=shape), dtype)
        kn = jnp.asarray(rng.normal(size=(batch, hkv, d)), dtype)
        vn = jnp.asarray(rng.normal(size=(batch, hkv, d)), dtype)
        for lengths in ([0, max_len - 1, 5][:batch], [max_len, -1, 1][:batch]):
            lengths = jnp.asarray(lengths, jnp.int32)
            out = jaxnorm.decode_attention(q, k, v, lengths, layout=layout)
            out2, k2, v2 = jax.jit(lambda *a: jaxnorm.decode_attention(*a[:4], k_new=a[4], v_new=a[5], layout=layout))(
                q, k, v, lengths, kn, vn)
            jax.block_until_ready((out, out2, k2, v2))
        print(batch, hq, hkv, max_len, d, dtype, layout, "ran", flush=True)


if __name__ == "__main__":
    main()
