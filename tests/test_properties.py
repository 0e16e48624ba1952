"""Property tests: random shapes, axes, dtypes and parameter sets, every op against the float64
reference. Hypothesis picks the structure; a drawn seed makes the values, so a failure's
printed example reproduces it."""


import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from cases import DTYPES, check_op, op_params

leading = st.lists(st.integers(1, 4), max_size=3)
widths = st.integers(1, 300)
dtypes = st.sampled_from(["float32", "bfloat16", "float16"])
seeds = st.integers(0, 2**63 - 1)


@op_params()
@settings(max_examples=20, deadline=None)
@given(lead=leading, width=widths, dtype=dtypes, seed=seeds, data=st.data())
def test_matches_reference(op, lead, width, dtype, seed, data):
    shape = (*lead, width)
    rng = np.random.default_rng(seed)
    kw = {}
    if op.is_norm:
        k = data.draw(st.integers(1, min(2, len(shape))), label="trailing axes")
        kw["axis"] = -1 if k == 1 else tuple(range(-k, 0))
        kw["names"] = tuple(sorted(data.draw(st.sets(st.sampled_from(op.params)), label="params")))
        kw["memory_efficient"] = data.draw(st.booleans(), label="memory_efficient")
        kw["bounded_scale"] = kw["memory_efficient"]
    else:
        axes = data.draw(st.sets(st.integers(0, len(shape) - 1), min_size=1) | st.none(), label="axes")
        kw["axis"] = None if axes is None else (sorted(axes)[0] if len(axes) == 1 else tuple(sorted(axes)))
    check_op(op, rng, shape, DTYPES[dtype], **kw)
