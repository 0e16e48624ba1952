"""Issue 4's targets checked against a bench.json (bfloat16, 2^27 elements per input).

    python benchmarks/targets.py benchmarks/results/h100-f21b90e/bench.json

Prints one Markdown table: each target, the shapes it covers, how many meet it, and the misses
with their measured value.
"""
import json
import sys

NORMS = ("layer_norm", "rms_norm")
SOFTMAXES = ("softmax", "log_softmax")


def main(path):
    rows = [r for r in json.load(open(path))["results"] if r["dtype"] == "bfloat16" and r["group"] == "sweep"]

    def frac(r):
        return r["impls"]["jaxnorm"]["frac_copy"]

    def me_ratio(r):
        return r["impls"]["jaxnorm-me"]["time_s"] / r["impls"]["jaxnorm"]["time_s"]

    targets = [
        ("fwd ≥ 90% of copy, 256…32768", lambda r: r["direction"] == "fwd" and 256 <= r["cols"] <= 32768,
         lambda r: frac(r) >= 0.90, lambda r: f"{frac(r):.0%}"),
        ("fwd ≥ 80% of copy, 128 and 65536…262144",
         lambda r: r["direction"] == "fwd" and (r["cols"] == 128 or r["cols"] >= 65536),
         lambda r: frac(r) >= 0.80, lambda r: f"{frac(r):.0%}"),
        ("norm fwd+bwd ≥ 80% of copy, 1024…32768",
         lambda r: r["direction"] == "fwd+bwd" and r["op"] in NORMS and 1024 <= r["cols"] <= 32768,
         lambda r: frac(r) >= 0.80, lambda r: f"{frac(r):.0%}"),
        ("softmax fwd+bwd ≥ 80% of copy, all widths",
         lambda r: r["direction"] == "fwd+bwd" and r["op"] in SOFTMAXES,
         lambda r: frac(r) >= 0.80, lambda r: f"{frac(r):.0%}"),
        ("≥ 1.0× XLA, every op, direction, width", lambda r: True,
         lambda r: r["speedup"] >= 1.0, lambda r: f"{r['speedup']:.2f}×"),
        ("LayerNorm fwd+bwd ≥ 2× XLA", lambda r: r["direction"] == "fwd+bwd" and r["op"] == "layer_norm",
         lambda r: r["speedup"] >= 2.0, lambda r: f"{r['speedup']:.2f}×"),
        ("memory-efficient norm fwd+bwd ≤ 1.03× the default",
         lambda r: r["direction"] == "fwd+bwd" and "time_s" in r["impls"].get("jaxnorm-me", {}),
         lambda r: me_ratio(r) <= 1.03, lambda r: f"{me_ratio(r):.3f}×"),
    ]
    short = {"layer_norm": "LN", "rms_norm": "RMS", "softmax": "SM", "log_softmax": "LSM"}
    print("| target (bf16) | met | misses (op dir width: value) |")
    print("|---|---|---|")
    for name, covers, meets, value in targets:
        sel = [r for r in rows if covers(r)]
        miss = [r for r in sel if not meets(r)]
        text = ", ".join(f"{short[r['op']]} {'fwd' if r['direction'] == 'fwd' else 'f+b'} {r['cols']}: {value(r)}"
                         for r in miss) or "none"
        print(f"| {name} | {len(sel) - len(miss)}/{len(sel)} | {text} |")


if __name__ == "__main__":
    main(sys.argv[1])
