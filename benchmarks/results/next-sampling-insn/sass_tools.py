"""Parse nvdisasm -c -g output of one function: instructions with address, source file:line, opcode.
Find loops (backward branches) and print per-loop histograms."""
import re, sys, collections
INS = re.compile(r'^\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;')
LINE = re.compile(r'//## File "([^"]+)", line (\d+)')
def parse(path):
    out = []; cur = ('?', 0)
    for l in open(path):
        m = LINE.search(l)
        if m:
            cur = (m.group(1).split('/')[-1], int(m.group(2))); continue
        m = INS.match(l)
        if m:
            addr = int(m.group(1), 16); text = m.group(2)
            t = text
            pred = ''
            if t.startswith('@'):
                pred, t = t.split(None, 1)
            op = t.split()[0]
            out.append(dict(addr=addr, text=text, op=op, pred=pred, src=cur))
    return out
def loops(ins):
    res = []
    for i in ins:
        if i['op'].startswith('BRA') or i['op'] == 'BRA':
            m = re.search(r'`\(\.L_x_\d+\)|0x([0-9a-f]+)', i['text'])
    return res
def label_addrs(path):
    labs = {}; pending = []
    for l in open(path):
        m = re.match(r'^(\.L_x_\d+):', l.strip())
        if m: pending.append(m.group(1)); continue
        m = INS.match(l)
        if m:
            for p in pending: labs[p] = int(m.group(1), 16)
            pending = []
    return labs
def back_edges(path):
    ins = parse(path); labs = label_addrs(path)
    edges = []
    for i in ins:
        if i['op'].startswith('BRA'):
            m = re.search(r'(\.L_x_\d+)', i['text'])
            if m and labs.get(m.group(1), 1 << 40) <= i['addr']:
                edges.append((labs[m.group(1)], i['addr'], i['pred'], i['src']))
    return ins, edges
def rng(ins, a, b):
    return [i for i in ins if a <= i['addr'] <= b]
def hist(seq):
    return collections.Counter(i['op'].split('.')[0] for i in seq)
if __name__ == '__main__':
    ins, edges = back_edges(sys.argv[1])
    print('instructions', len(ins))
    h = hist(ins); print(sorted(h.items(), key=lambda x: -x[1])[:40])
    for a, b, p, s in edges:
        body = rng(ins, a, b)
        srcs = collections.Counter(i['src'] for i in body).most_common(4)
        print(f'loop {a:#06x}-{b:#06x} n={len(body)} pred={p} br@{s} top={srcs}')
