"""Two bench.json runs side by side in absolute bandwidth (TB/s), for one dtype: jaxnorm and XLA
in each run, and the copy baseline. '% of copy' moves with each run's copy measurement (it varied
2.39-2.64 TB/s for bf16 between H100 machines), so changes between runs are read here.

    python benchmarks/compare.py OLD/bench.json NEW/bench.json [bfloat16]
"""
import json
import sys

SHORT = {"layer_norm": "LN", "rms_norm": "RMS", "softmax": "SM", "log_softmax": "LSM"}


def load(path, dtype):
    out = {}
    for r in json.load(open(path))["results"]:
        if r["dtype"] == dtype and r["group"] == "sweep":
            key = (r["cols"], r["op"], r["direction"])
            xla = r["impls"].get("xla")  # absent from a run of --impls jaxnorm
            out[key] = (r["impls"]["jaxnorm"]["bw_Bps"] / 1e12, xla["bw_Bps"] / 1e12 if xla else float("nan"),
                        r["copy_bw_Bps"] / 1e12)
    return out


def main(old_path, new_path, dtype="bfloat16"):
    old, new = load(old_path, dtype), load(new_path, dtype)
    print(f"{dtype}, TB/s: jaxnorm old -> new (change) | XLA old -> new (nan: not run) | copy old -> new")
    print("| width | op | jaxnorm old | jaxnorm new | change | XLA old | XLA new | copy old | copy new |")
    print("|---|---|---|---|---|---|---|---|---|")
    for key in sorted(set(old) & set(new)):
        (jo, xo, co), (jn, xn, cn) = old[key], new[key]
        cols, op, direction = key
        name = SHORT[op] + (" f+b" if direction == "fwd+bwd" else " fwd")
        print(f"| {cols} | {name} | {jo:.2f} | {jn:.2f} | {jn / jo - 1:+.0%} | {xo:.2f} | {xn:.2f} | {co:.2f} | {cn:.2f} |")


if __name__ == "__main__":
    main(*sys.argv[1:])
