"""How much memory does ``memory_efficient=True`` save in a transformer's gradient step?

A small pre-LN transformer (GPT-2 style) in plain JAX, parameters as a list of dicts::

    for each layer:
        h   = x + Attn(LN1(x))        # causal multi-head self-attention, jaxnorm.softmax
        x'  = h + MLP(LN2(h))         # d -> 4d -> d, gelu
    out = LN_f(x_L)                   # final norm
    loss = mean(out ** 2)

All norms are ``jaxnorm.layer_norm`` (or ``jaxnorm.rms_norm`` with ``norm="rms_norm"``).
:func:`peak_memory` jits ``value_and_grad(loss)``, lowers and compiles it, and reads the
compiled executable's ``memory_analysis()``; :func:`main` prints the saving for several layer
counts. Run ``python examples/transformer_memory.py``.

What is measured
----------------
``CompiledMemoryStats`` (jax 0.10) has ``argument_size_in_bytes``, ``output_size_in_bytes``,
``alias_size_in_bytes``, ``temp_size_in_bytes``, ``generated_code_size_in_bytes``, their
``host_*`` twins, and ``peak_memory_in_bytes``. The arguments (parameters, input) and outputs
(loss, gradients) are the same in both modes; everything the backward keeps alive from the
forward (the "residuals") is in ``temp_size_in_bytes``, the size of the one buffer XLA's buffer
assignment packs all temporaries into, i.e. the peak of the live temporaries. That is the
number compared here. ``peak_memory_in_bytes`` is meaningful on GPU, but on XLA:CPU it
reports only arguments + outputs (it does not change with either mode or the layer count), so
it is printed but not used. ``total = argument + output + temp - alias`` is printed as the
footprint of the step.

What ``memory_efficient`` saves: 2 activations per layer
-------------------------------------------------------
Let ``A = batch * seq * d_model * itemsize``, one activation of the block input. Each block
has two norms. With ``memory_efficient=False`` each norm keeps its *input* for the backward:
LN1 keeps the block input ``x`` and LN2 keeps the mid-block residual stream ``h``. Nothing else
in the block needs ``x`` or ``h`` in the backward: the gradient of a residual add reads neither
operand, and the matmuls after the norms keep their own inputs, which are the norm *outputs*
``y``. So ``x`` and ``h`` are kept alive by the norms alone.

With ``memory_efficient=True`` each norm keeps ``y`` instead, which the following matmul
(``y @ wqkv``, ``y @ w1``) keeps anyway for its weight gradient: in the compiled HLO the norm's
backward and the weight-gradient ``dot`` read the same buffer, so keeping ``y`` costs nothing,
and ``x`` and ``h`` die as soon as the forward is done with them. Each norm call saves one ``A``,
each layer **2 A**; layer_norm also drops its per-row ``mean`` (``rows * 4`` bytes, ``A / d_model``
in float32), so its slope is ``2 + 2 / d_model``; ``rstd`` is kept in both modes. XLA neither
rematerializes (no memory limit is set) nor finds another reason to keep ``x`` or ``h``.

Why compare slopes, not one layer count
---------------------------------------
The temporaries peak at the turn from forward to backward or inside the last block's backward.
At any such point every earlier layer's residuals are live, so one more layer adds exactly one
layer's residuals to the peak: 2 A more with ``memory_efficient`` off than on. That slope is
the invariant. The *intercept* depends on where exactly each mode's peak falls:

* XLA:CPU (jax 0.10): both peaks are in the last block's MLP backward (its weight-gradient
  transposes), after the final norm's backward has freed ``x_L``; layer 0's LN1 input is the
  step's argument, which is argument memory, not temp, in both modes. The saving is exactly
  ``(2 L - 1) A`` (+ the means), checked against XLA's buffer live ranges at the peak
  (``XLA_FLAGS=--xla_dump_to=DIR``, file ``*-live-range.txt``): with the mode off, 2L norm inputs
  are live there (one of them the argument); with it on, none.
* XLA:GPU (H100, jax 0.11.2; compiled only): the peak moves with the autotuner's choices, so
  the saving was ``(2 L - 1) A``, ``(2 L - 2) A`` or ``(2 L - 5) A`` in different processes,
  and in float32 with 2 or 3 layers a peak that does not grow with the layer count (the same in
  both modes) can dominate (saving 0 at 2 layers). The slope from 4 layers on was 2.0078 A
  (layer_norm) and 2.0000 A (rms_norm) in every process, in float32 and bfloat16 (2.0156 A for
  bf16 layer_norm: the means are float32, ``2 A / d_model`` each).

Hence :func:`per_layer_slope` and the test use 4 and 8 layers.

Where it saves nothing: bfloat16 on XLA:CPU
-------------------------------------------
XLA:CPU has no bfloat16 matmul: it converts the bf16 operands to float32 and keeps that
float32 copy of ``y`` for the weight gradient. The bf16 ``y`` is then kept *only* by the
memory-efficient norm, so the mode trades ``x`` (bf16) for ``y`` (bf16) and saves nothing per
layer (measured: slope 0, total -1 A: the first layer's ``x`` was an argument anyway, so its
``y`` is an extra). GPU bf16 matmuls keep ``y`` itself and the saving is 2 A per layer there.
The general rule: ``memory_efficient`` pays off exactly when the norm's consumer keeps the
norm output in ``x``'s dtype and nothing else keeps the norm input.
"""

from __future__ import annotations

import math
import sys
import time

import jax
import jax.numpy as jnp

import jaxnorm


def init_params(key, n_layers, d_model, dtype=jnp.float32, norm="layer_norm"):
    """A list of per-layer dicts plus a final-norm dict. Norm parameters are float32 (scale
    away from 0, so the memory-efficient backward is well conditioned); matrices in ``dtype``."""
    def dense(k, fan_in, fan_out):
        return (jax.random.normal(k, (fan_in, fan_out), jnp.float32) / math.sqrt(fan_in)).astype(dtype)

    def norm_params(k):
        ks, kb = jax.random.split(k)
        p = {"scale": 1.0 + 0.1 * jax.random.normal(ks, (d_model,), jnp.float32)}
        if norm == "layer_norm":
            p["bias"] = 0.1 * jax.random.normal(kb, (d_model,), jnp.float32)
        return p

    keys = jax.random.split(key, n_layers + 1)
    layers = []
    for k in keys[:-1]:
        ks = jax.random.split(k, 6)
        layers.append({
            "ln1": norm_params(ks[0]),
            "wqkv": dense(ks[1], d_model, 3 * d_model),
            "wo": dense(ks[2], d_model, d_model),
            "ln2": norm_params(ks[3]),
            "w1": dense(ks[4], d_model, 4 * d_model),
            "w2": dense(ks[5], 4 * d_model, d_model),
        })
    return {"layers": layers, "ln_f": norm_params(keys[-1])}


def apply_norm(x, p, norm, memory_efficient):
    if norm == "layer_norm":
        return jaxnorm.layer_norm(x, p["scale"], p["bias"], memory_efficient=memory_efficient)
    if norm == "rms_norm":
        return jaxnorm.rms_norm(x, p["scale"], memory_efficient=memory_efficient)
    raise ValueError(f"unknown norm {norm!r}")


def attention(y, p, n_heads):
    b, s, d = y.shape
    hd = d // n_heads
    q, k, v = jnp.split(y @ p["wqkv"], 3, axis=-1)
    q, k, v = (t.reshape(b, s, n_heads, hd) for t in (q, k, v))
    logits = jnp.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(hd)
    causal = jnp.tril(jnp.ones((s, s), bool))
    probs = jaxnorm.softmax(logits, where=causal)
    return jnp.einsum("bhqk,bkhd->bqhd", probs, v).reshape(b, s, d) @ p["wo"]


def mlp(y, p):
    return jax.nn.gelu(y @ p["w1"]) @ p["w2"]


def block(x, p, *, n_heads, norm, memory_efficient):
    h = x + attention(apply_norm(x, p["ln1"], norm, memory_efficient), p, n_heads)
    return h + mlp(apply_norm(h, p["ln2"], norm, memory_efficient), p)


def forward(params, x, *, n_heads=4, norm="layer_norm", memory_efficient=False):
    for p in params["layers"]:
        x = block(x, p, n_heads=n_heads, norm=norm, memory_efficient=memory_efficient)
    return apply_norm(x, params["ln_f"], norm, memory_efficient)


def loss_fn(params, x, **kw):
    return jnp.mean(jnp.square(forward(params, x, **kw).astype(jnp.float32)))


def compile_step(memory_efficient, n_layers, batch, seq, d_model, dtype=jnp.float32, *,
                 n_heads=4, norm="layer_norm"):
    """``jax.jit(value_and_grad(loss)).lower(...).compile()`` on abstract inputs (nothing runs)."""
    params = jax.eval_shape(lambda: init_params(jax.random.key(0), n_layers, d_model, dtype, norm))
    x = jax.ShapeDtypeStruct((batch, seq, d_model), dtype)
    kw = dict(n_heads=n_heads, norm=norm, memory_efficient=memory_efficient)
    step = jax.jit(jax.value_and_grad(lambda p, x: loss_fn(p, x, **kw)))
    return step.lower(params, x).compile()


def peak_memory(memory_efficient, n_layers, batch, seq, d_model, dtype=jnp.float32, **kw):
    """The compiled gradient step's memory, in bytes: ``temp`` (the residuals and scratch: the
    number that ``memory_efficient`` changes), ``argument``, ``output``, ``alias``, ``total`` =
    argument + output + temp - alias, and ``peak`` as XLA reports it (see module docstring)."""
    m = compile_step(memory_efficient, n_layers, batch, seq, d_model, dtype, **kw).memory_analysis()
    out = {
        "temp": m.temp_size_in_bytes,
        "argument": m.argument_size_in_bytes,
        "output": m.output_size_in_bytes,
        "alias": m.alias_size_in_bytes,
    }
    out["total"] = out["argument"] + out["output"] + out["temp"] - out["alias"]
    out["peak"] = getattr(m, "peak_memory_in_bytes", None)
    return out


def activation_bytes(batch, seq, d_model, dtype):
    return batch * seq * d_model * jnp.dtype(dtype).itemsize


def saving(n_layers, batch, seq, d_model, dtype=jnp.float32, **kw):
    """(temp bytes off, temp bytes on) for one layer count."""
    off = peak_memory(False, n_layers, batch, seq, d_model, dtype, **kw)
    on = peak_memory(True, n_layers, batch, seq, d_model, dtype, **kw)
    for k in ("argument", "output"):
        assert off[k] == on[k], (k, off[k], on[k])  # only the temporaries may change
    return off, on


def per_layer_slope(layer_counts=(4, 8), *, batch=4, seq=256, d_model=256, dtype=jnp.float32, **kw):
    """Least-squares slope of the temp saving over the layer count, in activations ``A``, and
    the saving per layer count in ``A`` (expected slope: 2, one per norm)."""
    act = activation_bytes(batch, seq, d_model, dtype)
    saved = {}
    for n in layer_counts:
        off, on = saving(n, batch, seq, d_model, dtype, **kw)
        saved[n] = (off["temp"] - on["temp"]) / act
    xs, ys = list(saved), list(saved.values())
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return slope, saved


def _mib(b):
    return f"{b / 2**20:9.2f}"


def table(layer_counts=(2, 4, 8), batch=4, seq=256, d_model=256, dtype=jnp.float32, norm="layer_norm"):
    act = activation_bytes(batch, seq, d_model, dtype)
    name = jnp.dtype(dtype).name
    print(f"\n{norm}, {name}, batch {batch}, seq {seq}, d_model {d_model}, backend "
          f"{jax.default_backend()}: activation A = {act} B = {act / 2**20:.2f} MiB")
    print(f"{'layers':>6} {'temp off':>9} {'temp on':>9} {'total off':>9} {'total on':>9} "
          f"{'saving':>9} {'sav/layer':>9} {'sav/A':>7} {'sav/L/A':>8} {'slope/A':>8}")
    print(f"{'':>6} {'MiB':>9} {'MiB':>9} {'MiB':>9} {'MiB':>9} {'MiB':>9} {'MiB':>9}")
    prev = None
    rows = []
    for n in layer_counts:
        off, on = saving(n, batch, seq, d_model, dtype, norm=norm)
        s = off["temp"] - on["temp"]
        slope = "" if prev is None else f"{(s - prev[1]) / (n - prev[0]) / act:8.4f}"
        print(f"{n:>6} {_mib(off['temp'])} {_mib(on['temp'])} {_mib(off['total'])} {_mib(on['total'])} "
              f"{_mib(s)} {_mib(s / n)} {s / act:7.3f} {s / n / act:8.4f} {slope:>8}")
        prev = (n, s)
        rows.append((n, off, on))
    if all(off["peak"] is not None and on["peak"] is not None for _, off, on in rows):
        peaks = ", ".join(f"L={n}: {off['peak'] / 2**20:.2f}/{on['peak'] / 2**20:.2f}" for n, off, on in rows)
        print(f"(peak_memory_in_bytes, off/on, MiB: {peaks})")
    return rows


def main(argv=None):
    """``python examples/transformer_memory.py [LAYERS ...]`` (default 2 4 8)."""
    argv = sys.argv[1:] if argv is None else argv
    layer_counts = tuple(int(a) for a in argv) or (2, 4, 8)
    t0 = time.perf_counter()
    table(layer_counts, norm="layer_norm")
    table(layer_counts, norm="rms_norm")
    table(layer_counts, dtype=jnp.bfloat16, norm="layer_norm")
    print(f"\n({time.perf_counter() - t0:.1f} s.) A: one activation of the block input. sav/A: the "
          "saving in A; slope/A: the saving per added layer, in A; expected 2 (one per norm; "
          "+2/d_model for layer_norm's means), from 4 layers on on GPU. bfloat16 on XLA:CPU saves "
          "nothing (its matmuls keep a float32 copy of y). See the module docstring.")


if __name__ == "__main__":
    main()
