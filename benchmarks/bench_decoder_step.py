"""Device time of the example decoder's generation loop (examples/gpt_decoder.py), both forms:
kernel time per token and kernels per token, and the kernels that take the most time. Tells
where a decoding step's time goes (the model's GEMMs, attention, norms, launches) when the
example's tokens/s ratio is close to 1. The caches are not donated here (each timed call reuses
them), so every call also copies them once: that copy, spread over the steps, is in both forms.

    python benchmarks/bench_decoder_step.py [--batch 8 --context 1024 4096]
"""
from __future__ import annotations

import argparse
import os
import sys

import jax
import jax.numpy as jnp

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "examples"))
import device_time as dt  # noqa: E402
import gpt_decoder as ex  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--context", type=int, nargs="+", default=[1024, 4096])
    ap.add_argument("--steps", type=int, default=32)
    args = ap.parse_args(argv)
    params, heads = ex.init(jax.random.key(0), vocab=32000, layers=12, d=768, heads=12, kv_heads=4,
                            dtype=jnp.bfloat16)
    for batch in args.batch:
        for context in args.context:
            for form in ("jaxnorm", "jnp"):
                start = context - args.steps - 1
                gen = jax.jit(lambda p, k, f, c, form=form: ex.generate(p, heads, k, f, c, args.steps, form=form,
                                                                          start=start))
                caches = ex.empty_caches(params, heads, batch, context, blhd=form == "jnp")
                first = jnp.zeros((batch,), jnp.int32)
                r = dt.device_time(gen, [(params, jax.random.key(1), first, caches)], reps=3)
                per_token = r["mean"] / args.steps
                top = sorted(r["by_kernel"].items(), key=lambda kv: -kv[1])[:6]
                print(f"batch {batch} context {context} {form:8s}: {per_token * 1e6:7.1f} us of kernels per step, "
                      f"{r['kernels_per_call'] / args.steps:5.0f} kernels per step", flush=True)
                for name, t in top:
                    print(f"      {t / args.steps * 1e6:6.1f} us  {name.split('(')[0][:70]}", flush=True)


if __name__ == "__main__":
    main()
