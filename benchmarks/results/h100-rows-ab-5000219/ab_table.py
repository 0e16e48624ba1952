import json, os, glob, collections
out = os.environ.get("OUT", "/tmp/out"); d = collections.defaultdict(dict)
for f in glob.glob(f"{out}/rows_dt_*.json"):
    for r in json.load(open(f)):
        d[r["tag"][0].upper()].setdefault((r["dtype"], r["op"], r["dir"], r["width"]), []).append(r["us"])
vs = sorted(d); base = os.environ.get("BASE", "B"); base = base if base in d else vs[0]
for k in sorted(d[base]):
    b = min(d[base][k])
    print(f"{k[0][:4]} {k[1]:11s} {k[2]:7s} {k[3]:6d}  {base} {b:8.1f}us " + "  ".join(f"{v}/{base} {min(d[v][k])/b:.3f}" for v in vs if v != base and k in d[v]))
