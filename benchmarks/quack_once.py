"""Runs one of QuACK's row ops (PyTorch) CALLS times on one shape, for Nsight Compute to capture its
kernels, as profile_one.py runs jaxnorm's; the calls are quack_torch.py's (row_calls), the inputs
made on the host so the profile holds only the op's kernels (ncu_cells.sh).

    ncu --clock-control none --metrics gpu__time_duration.sum --csv \
        python benchmarks/quack_once.py rms_norm fwd 4096x32768 bfloat16 3
"""
import sys

import numpy as np
import torch

from quack_torch import row_calls


def main(op, direction, shape, dtype, calls="1"):
    rows, cols = (int(v) for v in shape.split("x"))
    g = np.random.default_rng(0)
    # Converted on the host: a conversion on the GPU would be a kernel in the profile.
    x, dy = (torch.from_numpy(g.standard_normal((rows, cols), np.float32)).to(getattr(torch, dtype)).cuda()
             for _ in range(2))
    w = torch.from_numpy(1 + 0.1 * g.standard_normal(cols, np.float32)).cuda()
    b = torch.from_numpy(0.1 * g.standard_normal(cols, np.float32)).cuda()
    f = row_calls()[op][0 if direction == "fwd" else 1]
    for _ in range(int(calls)):
        f(x, dy, w, b)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main(*sys.argv[1:6])
