"""One small function that lowers to every jaxnorm FFI target (forwards, backwards, vmapped), and
its inputs: what test_export.py exports and runs in a fresh process, and the program whose custom
calls test_ffi_targets.py pins. Inputs and outputs are 32-bit, so the artifact exported under the
suite's x64 mode is called the same way in a process without it."""

import numpy as np

import jax
import jax.numpy as jnp

import jaxnorm
from jaxnorm import _ops

ROWS, WIDTH = 6, 64
VOCAB = 50
BATCH, MAX_LEN, CAPACITY, HEADS, HEAD_DIM = 3, 5, 12, 2, 64
KV_HEADS, CACHE_LEN = 1, 16
LA_LEN, LA_DV = 70, 32  # linear attention: past one 64-position chunk, d_v != d_k


def inputs(rng: np.random.Generator) -> dict[str, np.ndarray]:
    f32 = lambda *shape: rng.normal(size=shape).astype(np.float32)
    return {
        "x": f32(2, ROWS, WIDTH),
        "scale": rng.uniform(0.5, 1.5, WIDTH).astype(np.float32),
        "bias": f32(WIDTH),
        "logits": f32(ROWS, VOCAB),
        "vocab_bias": f32(VOCAB),
        "labels": np.array([3, -100, 0, 49, 7, 12], np.int32),
        "key": np.asarray(jax.random.key_data(jax.random.key(int(rng.integers(2**31))))),  # raw uint32[2]
        "lengths": np.array([5, 0, 3], np.int32),
        "padded": f32(BATCH, MAX_LEN, WIDTH),
        "w_qkv": f32(WIDTH, 3 * HEADS * HEAD_DIM) / 8,
        "b_qkv": f32(3 * HEADS * HEAD_DIM),
        "q": f32(BATCH, HEADS, HEAD_DIM),
        "k_cache": f32(BATCH, KV_HEADS, CACHE_LEN, HEAD_DIM),
        "v_cache": f32(BATCH, KV_HEADS, CACHE_LEN, HEAD_DIM),
        "k_new": f32(BATCH, KV_HEADS, HEAD_DIM),
        "v_new": f32(BATCH, KV_HEADS, HEAD_DIM),
        "cache_lengths": np.array([16, 7, 0], np.int32),
        "ids": rng.integers(0, VOCAB, (BATCH, 4)).astype(np.int32),
        "table": f32(VOCAB, WIDTH),
        "la_q": f32(BATCH, HEADS, LA_LEN, HEAD_DIM),
        "la_k": f32(BATCH, HEADS, LA_LEN, HEAD_DIM),
        "la_v": f32(BATCH, HEADS, LA_LEN, LA_DV),
    }


def _norms(a):
    x, s, b = a["x"], a["scale"], a["bias"]
    loss = lambda x, s, b: jnp.sum(jnp.sin(jaxnorm.layer_norm(x, s, b)))
    dx, ds, db = jax.grad(loss, (0, 1, 2))(x, s, b)
    # vmap folds the examples into rows; the per-example scale gradients come from one launch.
    per_example = jax.vmap(jax.grad(loss, 1), (0, None, None))(x, s, b)
    rms = jax.grad(lambda x: jnp.sum(jnp.sin(jaxnorm.rms_norm(x, s, memory_efficient=True))))(x)
    return {"layer_norm": jaxnorm.layer_norm(x, s, b), "dx": dx, "dscale": ds, "dbias": db,
            "per_example_dscale": per_example, "rms_norm_dx": rms}


def _add_norm(a):
    x, s, b = a["x"], a["scale"], a["bias"]

    def loss(x, r, s, b):
        y, h = jaxnorm.layer_norm(x, s, b, residual=r, scale_offset=1.0)
        return jnp.sum(jnp.sin(y)) + jnp.sum(h * h)  # both outputs' cotangents reach the backward

    dx, dr, ds, db = jax.grad(loss, (0, 1, 2, 3))(x, jnp.cos(x), s, b)
    return {"add_norm_dx": dx, "add_norm_dr": dr, "add_norm_dscale": ds, "add_norm_dbias": db}


def _softmax(a):
    x, mask = a["logits"], a["logits"] > -1.0
    dx = jax.grad(lambda x: jnp.sum(jnp.cos(jaxnorm.softmax(x, where=mask))))(x)
    return {"softmax_dx": dx, "log_softmax": jaxnorm.log_softmax(x, where=mask)}


def _cross_entropy(a):
    logits, labels = a["logits"], a["labels"]
    # Pinned with a mask (i1[2d]); its absence is the same target with a rank-1 placeholder.
    loss = lambda x: jnp.sum(jnp.sin(jaxnorm.softmax_cross_entropy(x, labels, where=x > -2.0, label_smoothing=0.1,
                                                                    z_loss=1e-4, ignore_index=-100)))
    value, dlogits = jax.value_and_grad(loss)(logits)
    # The first forward target, as an artifact exported before FFI version 4 calls it: kept
    # registered, so its signature stays pinned and its handlers run here.
    loss_v1, _ = _ops.cross_entropy_fwd_v1_p.bind(logits, labels.astype(jnp.int32), logits > -2.0, label_smoothing=0.1,
                                                   z_loss=1e-4, ignore_index=-100, has_mask=True)
    # A reduced loss differentiated: the fused forward-and-gradient target.
    reduced = lambda x: jaxnorm.softmax_cross_entropy(x, labels, where=x > -2.0, label_smoothing=0.1, z_loss=1e-4,
                                                      ignore_index=-100, reduction="mean")
    value_r, dlogits_r = jax.value_and_grad(reduced)(logits)
    return {"cross_entropy": value, "cross_entropy_dlogits": dlogits, "cross_entropy_v1": loss_v1,
            "cross_entropy_mean": value_r, "cross_entropy_mean_dlogits": dlogits_r}


def _sampling(a):
    logits = a["logits"]
    values, indices = jaxnorm.top_k(logits, 3)
    # vmap over requests, each with its own key: the keys fold into the kernel's per-row keys.
    keys = jax.random.split(a["key"], 2)
    per_request = jax.vmap(lambda k, l: jaxnorm.sample(k, l, top_p=0.8))(keys, logits.reshape(2, -1, VOCAB))
    # The decoding loop's logits update (pinned with every operand present: bias, finished, end_id).
    finished = jnp.arange(ROWS) % 3 == 0
    updated = jaxnorm.sample(a["key"], logits, top_k=10, bias=a["vocab_bias"], finished=finished,
                             end_id=jnp.arange(ROWS, dtype=jnp.int32))
    # The first sample and filter targets, as an artifact exported before FFI version 4 calls them:
    # kept registered, so their signatures stay pinned and their handlers run here.
    row = lambda v, dt: jnp.full((1,), v, dt)
    (tokens_v1,) = _ops.sample_v1_p.bind(logits, a["key"].reshape(1, -1), row(0.8, jnp.float32), row(10, jnp.int32),
                                         row(0.9, jnp.float32), row(-jnp.inf, jnp.float32))
    (filtered_v1,) = _ops.filter_v1_p.bind(logits, row(5, jnp.int32), row(1.0, jnp.float32),
                                           row(np.log(0.05), jnp.float32))
    return {"tokens": jaxnorm.sample(a["key"], logits, temperature=0.8, top_k=10, top_p=0.9),
            "tokens_per_request": per_request,
            # neither top_k nor top_p: the target without them (FFI version 6)
            "tokens_by_mass": jaxnorm.sample(a["key"], logits, temperature=0.7, min_p=0.05, finished=finished, end_id=2),
            "tokens_updated": updated, "tokens_v1": tokens_v1, "filtered_v1": filtered_v1,
            "filtered": jaxnorm.filter_logits(logits, top_k=5, min_p=0.05, bias=a["vocab_bias"]),
            "top_k_values": values, "top_k_indices": indices}


def _padding(a):
    offsets = jaxnorm.padding_offsets(a["lengths"], MAX_LEN, CAPACITY)

    def layer(padded, w):
        h = jaxnorm.remove_padding(padded, offsets)
        q, k, v = jaxnorm.add_qkv_bias_rebuild_padding(h @ w, a["b_qkv"], offsets, HEADS)
        h = h + jaxnorm.transpose_remove_padding(q * k + v, offsets) @ w[:, : HEADS * HEAD_DIM].T
        return jaxnorm.rebuild_padding(h, offsets)

    out, (d_padded, dw) = jax.value_and_grad(lambda p, w: jnp.sum(jnp.sin(layer(p, w))), (0, 1))(a["padded"], a["w_qkv"])
    return {"packed_layer": out, "packed_d_padded": d_padded, "packed_dw": dw}


def _decode(a):
    out = jaxnorm.decode_attention(a["q"], a["k_cache"], a["v_cache"], a["cache_lengths"])
    lengths = jnp.minimum(a["cache_lengths"], CACHE_LEN - 1)  # room for the appended token
    out2, k, v = jaxnorm.decode_attention(a["q"], a["k_cache"], a["v_cache"], lengths, k_new=a["k_new"], v_new=a["v_new"])
    return {"decode": out, "decode_append": out2, "k_cache": k, "v_cache": v}


def _embedding(a):
    embed = lambda t: jaxnorm.embed_with_position(a["ids"], t, position=jnp.arange(4, dtype=jnp.int32))
    dtable = jax.grad(lambda t: jnp.sum(jnp.sin(embed(t))))(a["table"])
    return {"embed": embed(a["table"]), "dtable": dtable}


def _linear_attention(a):
    q, k, v = a["la_q"], a["la_k"], a["la_v"]
    out, (s, z) = jaxnorm.linear_attention(q, k, v, return_state=True)
    # the gradient runs the same kernel on permuted operands (summing forwards and backwards)
    dq, dk, dv = jax.grad(lambda q, k, v: jnp.sum(jnp.sin(jaxnorm.linear_attention(q, k, v))), (0, 1, 2))(q, k, v)
    step, _ = jaxnorm.linear_attention_step(q[:, :, -1], k[:, :, -1], v[:, :, -1], (s, z))
    return {"linear_attention": out, "la_dq": dq, "la_dk": dk, "la_dv": dv, "la_step": step}


def program(a: dict) -> dict:
    return {**_norms(a), **_add_norm(a), **_softmax(a), **_cross_entropy(a), **_sampling(a), **_padding(a), **_decode(a), **_embedding(a),
            **_linear_attention(a)}
