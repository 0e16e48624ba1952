"""Count the instructions issued along one path of a loop body.
usage: trace.py file.sass start end [taken_addr ...] ; unconditional BRA are followed,
predicated BRA are not taken unless listed. Stops after issuing `end` (the back-edge)."""
import sys, re
sys.path.insert(0, __file__.rsplit('/', 1)[0])
from sass_tools import parse, label_addrs
f = sys.argv[1]; a = int(sys.argv[2], 16); e = int(sys.argv[3], 16)
taken = {int(x, 16) for x in sys.argv[4:]}
ins = parse(f); labs = label_addrs(f); by = {i['addr']: i for i in ins}
pc = a; n = 0; ops = {}
while True:
    i = by[pc]; n += 1
    k = i['op'].split('.')[0]; ops[k] = ops.get(k, 0) + 1
    if pc == e: break
    if i['op'].startswith('BRA') and (not i['pred'] or pc in taken):
        pc = labs[re.search(r'(\.L_x_\d+)', i['text']).group(1)]
    else:
        pc += 16
    assert n < 5000
print(n, sorted(ops.items(), key=lambda x: -x[1]))
