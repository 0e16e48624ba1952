"""``python -m jaxnorm``: environment report, self-check of every op against jaxnorm.reference,
and a small timing table of jaxnorm against XLA on this machine's default device.

Exits non-zero when any check fails (a self-check line, a missing jaxnorm custom call in the
lowered program, or a wrong result in the timing table).
"""

from __future__ import annotations

import argparse
import platform
import sys
import time

import numpy as np

import jax
import jax.numpy as jnp
from jax.experimental import checkify

import jaxnorm
from jaxnorm import _ffi, _timing as T, reference
from jaxnorm._ops import TARGETS as _TARGETS

# ----------------------------------------------------------------------------------------------
# (a) environment


def _lowered_targets(fn, *args) -> tuple[set[str], str | None]:
    """The jaxnorm custom-call targets in XLA's compiled program of jit(fn) for the default
    backend, or (targets in the lowered StableHLO, the compile error) when it does not compile."""
    lowered = jax.jit(fn).lower(*args)
    try:
        text, err = lowered.compile().as_text(), None
    except Exception as e:
        text, err = lowered.as_text(), T._err(e, 300)
    return {t for t in _TARGETS if t in text}, err


def _op_callable(op):
    if op == "layer_norm":
        return lambda x, s, b: jaxnorm.layer_norm(x, s, b)
    if op == "rms_norm":
        return lambda x, s: jaxnorm.rms_norm(x, s)
    return getattr(jaxnorm, op)


def report_environment() -> int:
    import jaxlib

    backend = jax.default_backend()
    print("== environment")
    print(f"jaxnorm {jaxnorm.__version__} ({jaxnorm.__file__})")
    print(f"jax {jax.__version__}, jaxlib {jaxlib.__version__}, python {platform.python_version()} "
          f"({platform.platform()})")
    print(f"default backend: {backend}; devices: "
          + ", ".join(f"{d} [{d.device_kind}]" for d in jax.devices()))
    if _ffi.cuda_built():
        print("CUDA handlers: built")
    else:
        print(f"CUDA handlers: not built ({_ffi.cuda_unavailable_reason()})")
    try:
        summary = _ffi.cuda_device_summary()
    except Exception as e:  # the CUDA side is optional
        summary = {"error": T._err(e)}
    if summary:
        print("CUDA device summary: " + ", ".join(f"{k}={v}" for k, v in summary.items()))
    tk = T.try_import_tokamax()
    print(f"tokamax: {'importable' if tk is not None else 'not installed'}")

    # Do the ops become jaxnorm custom calls on this backend (forward and backward)?
    expected = {
        "layer_norm": ({"jaxnorm_norm_fwd"}, {"jaxnorm_norm_fwd", "jaxnorm_norm_bwd"}),
        "rms_norm": ({"jaxnorm_norm_fwd"}, {"jaxnorm_norm_fwd", "jaxnorm_norm_bwd"}),
        "softmax": ({"jaxnorm_softmax_fwd"}, {"jaxnorm_softmax_fwd", "jaxnorm_softmax_bwd"}),
        "log_softmax": ({"jaxnorm_softmax_fwd"}, {"jaxnorm_softmax_fwd", "jaxnorm_softmax_bwd"}),
    }
    failures = 0
    xs, dys, params = T.make_inputs(0, (8, 256), jnp.float32, 1)
    x, dy = xs[0], dys[0]
    for op in T.OPS:
        fn = _op_callable(op)
        p = params[: T.N_PARAMS[op]]

        def fwd_bwd(x, dy, *p, fn=fn):
            y, pull = jax.vjp(fn, x, *p)
            return y, pull(dy)

        want_f, want_b = expected[op]
        try:
            got_f, err_f = _lowered_targets(fn, x, *p)
            got_b, err_b = _lowered_targets(fwd_bwd, x, dy, *p)
            ok = want_f <= got_f and want_b <= got_b and not err_f and not err_b
            detail = f"fwd -> {sorted(got_f) or 'none'}; fwd+bwd -> {sorted(got_b) or 'none'}"
            if err_f or err_b:
                detail += f"; compile failed: {err_f or err_b}"
        except Exception as e:
            ok, detail = False, "lowering failed: " + T._err(e, 300)
        failures += not ok
        print(f"{'PASS' if ok else 'FAIL'}  {op} lowers to jaxnorm custom calls on {backend}: "
              f"{detail}")
    return failures


# ----------------------------------------------------------------------------------------------
# (b) self-check against the reference in float64

# err / (atol * max|ref| + rtol * |ref|) <= 1, the reference computed in float64 from the same
# (rounded) inputs. float32 values are ~1e-6 off; bfloat16 ones carry the output rounding
# (2^-9 relative) and, for the softmax backward, y's rounding.
SELF_TOL = {"float32": (2e-5, 2e-5), "bfloat16": (1e-2, 1e-2)}

SHAPES = [(7, 33), (3, 1025)]


def _cases():
    """(label, op, kwargs, shape, dtype_name, direction)."""
    out = []
    for op in T.OPS:
        for dtype in ("float32", "bfloat16"):
            for shape in SHAPES:
                for d in T.DIRECTIONS:
                    out.append((op, op, {}, shape, dtype, d))
    # A few variants: masked softmax, a non-trailing softmax axis, a 3-D norm over two axes,
    # apex's memory-efficient backward, norms without parameters.
    out += [
        ("softmax where=mask", "softmax", {"where": True}, (7, 33), "float32", "fwd+bwd"),
        ("log_softmax where=mask", "log_softmax", {"where": True}, (7, 33), "float32", "fwd+bwd"),
        ("softmax axis=0", "softmax", {"axis": 0}, (33, 7), "float32", "fwd+bwd"),
        ("layer_norm axis=(-2,-1)", "layer_norm", {"axis": (-2, -1)}, (3, 5, 19), "float32",
         "fwd+bwd"),
        ("layer_norm memory_efficient", "layer_norm", {"memory_efficient": True}, (7, 33),
         "float32", "fwd+bwd"),
        ("rms_norm memory_efficient", "rms_norm", {"memory_efficient": True}, (3, 1025),
         "bfloat16", "fwd+bwd"),
        ("layer_norm no scale/bias", "layer_norm", {"no_params": True}, (7, 33), "float32",
         "fwd+bwd"),
        # The residual-add norms (their output y + h, so dy reaches both) and zero-centred scales.
        ("layer_norm residual", "layer_norm", {"residual": True}, (7, 33), "float32", "fwd+bwd"),
        ("rms_norm residual", "rms_norm", {"residual": True}, (5, 1025), "bfloat16", "fwd+bwd"),
        ("layer_norm scale_offset=1", "layer_norm", {"scale_offset": 1.0}, (7, 33), "float32", "fwd+bwd"),
        ("rms_norm scale_offset=1", "rms_norm", {"scale_offset": 1.0}, (3, 1025), "bfloat16", "fwd+bwd"),
    ]
    return out


def _fns(op, kw, shape):
    """(jaxnorm_fn, reference_fn, n_params, param_shape) for a case."""
    kw = dict(kw)
    no_params = kw.pop("no_params", False)
    use_mask = kw.pop("where", False)
    n_params = 0 if no_params else T.N_PARAMS[op]
    axis = kw.pop("axis", -1)
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    pshape = tuple(shape[a] for a in axes)
    mask = None
    if use_mask:
        mask = np.random.default_rng(1).random(shape) > 0.3
        mask[0] = False  # one fully masked row
    jn, ref = getattr(jaxnorm, op), getattr(reference, op)
    if op in ("layer_norm", "rms_norm"):
        mem = kw.pop("memory_efficient", False)
        offset = kw.pop("scale_offset", 0.0)
        # eighths: exact in every dtype, so both sides add the same residual
        res = np.random.default_rng(2).integers(-16, 16, shape) / 8.0 if kw.pop("residual", False) else None

        def call(fn, x, p, **extra):
            if res is None:
                return fn(x, *p, axis=axis, epsilon=T.EPSILON, scale_offset=offset, **extra)
            y, h = fn(x, *p, axis=axis, epsilon=T.EPSILON, scale_offset=offset,
                      residual=jnp.asarray(res, x.dtype), **extra)
            return y + h

        def f(x, *p):
            return call(jn, x, p, memory_efficient=mem)

        def r(x, *p):
            return call(ref, x, p)
    else:

        def f(x):
            return jn(x, axis=axis, where=None if mask is None else jnp.asarray(mask))

        def r(x):
            return ref(x, axis=axis, where=None if mask is None else jnp.asarray(mask))
    assert not kw, kw
    return f, r, n_params, pshape


def _vjp_fn(fn, direction):
    if direction == "fwd":
        return jax.jit(lambda x, dy, *p: (fn(x, *p),))

    def g(x, dy, *p):
        y, pull = jax.vjp(fn, x, *p)
        return (y, *pull(dy))

    return jax.jit(g)


def self_check() -> int:
    print("\n== self-check against jaxnorm.reference (float64)")
    failures = 0
    rng = np.random.default_rng(0)
    for label, op, kw, shape, dtype_name, direction in _cases():
        dtype = T.DTYPES[dtype_name]
        tag = f"{label:<28} {dtype_name:<8} {'x'.join(map(str, shape)):>9} {direction:<7}"
        try:
            f, r, n_params, pshape = _fns(op, kw, shape)
            x = jnp.asarray((rng.standard_normal(shape) * 2 + 0.5).astype(np.float32)).astype(dtype)
            dy = jnp.asarray(rng.standard_normal(shape).astype(np.float32)).astype(dtype)
            params = [jnp.asarray((1 + 0.3 * rng.standard_normal(pshape)).astype(np.float32)),
                      jnp.asarray((0.3 * rng.standard_normal(pshape)).astype(np.float32))]
            params = params[:n_params]
            got = _vjp_fn(f, direction)(x, dy, *params)
            with jax.enable_x64(True):
                x64 = jnp.asarray(np.asarray(x.astype(jnp.float32)), jnp.float64)
                dy64 = jnp.asarray(np.asarray(dy.astype(jnp.float32)), jnp.float64)
                p64 = [jnp.asarray(np.asarray(p), jnp.float64) for p in params]
                want = _vjp_fn(r, direction)(x64, dy64, *p64)
                want = [np.asarray(w) for w in want]
            got = [np.asarray(g.astype(jnp.float32)) for g in got]
            bad = [f"output {i} is {g.dtype}{g.shape}, reference {w.shape}"
                   for i, (g, w) in enumerate(zip(got, want)) if g.shape != w.shape]
            if bad or len(got) != len(want):
                raise AssertionError("; ".join(bad) or f"{len(got)} outputs vs {len(want)}")
            atol, rtol = SELF_TOL[dtype_name]
            stats = [T._compare_host(g.astype(np.float64), w.astype(np.float64), atol, rtol)
                     for g, w in zip(got, want)]
            worst = max(s[0] for s in stats) if all(s[0] == s[0] for s in stats) else float("nan")
            ok = worst <= 1.0
            names = ["y", "dx", "dscale", "dbias"][: len(stats)]
            detail = ", ".join(f"{n} err {s[1]:.2g}" for n, s in zip(names, stats))
            print(f"{'PASS' if ok else 'FAIL'}  {tag} worst {worst:.2g} of tolerance ({detail})")
        except Exception as e:
            ok = False
            print(f"FAIL  {tag} {T._err(e, 300)}")
        failures += not ok
    return failures


def _report_checks(family: str, dtype_name: str, run, *, width: int) -> int:
    """Runs run(checks), which fills {name: passed}, prints a PASS/FAIL line each (an exception
    is one more failure), and returns the failures."""
    checks = {}
    try:
        run(checks)
    except Exception as e:
        checks["ran"] = False
        print(f"FAIL  {family} {dtype_name}: {T._err(e, 300)}")
    for name, ok in checks.items():
        print(f"{'PASS' if ok else 'FAIL'}  {name:<{width}} {dtype_name}")
    return sum(not ok for ok in checks.values())


def self_check_sampling() -> int:
    """The sampling family: lowering, exact filters and top_k, and draws inside the kept sets."""
    print("\n== self-check of sampling (sample, filter_logits, top_k) against jaxnorm.reference")
    failures = 0
    rng = np.random.default_rng(1)
    key = jax.random.key(0)
    for dtype_name in ("float32", "bfloat16"):
        x = jnp.asarray(3 * rng.standard_normal((16, 1000)), T.DTYPES[dtype_name])

        def run(checks, x=x):
            targets, err = _lowered_targets(lambda k, x: jaxnorm.sample(k, x, top_k=5), key, x)
            checks["sample lowers to jaxnorm_sample"] = "jaxnorm_sample" in targets and not err
            for kw in (dict(top_k=50), dict(top_p=0.9), dict(top_k=50, top_p=0.8, min_p=0.01)):
                got = jaxnorm.filter_logits(x, **kw).astype(jnp.float32)
                want = jaxnorm.reference.filter_logits(x, **kw).astype(jnp.float32)
                checks[f"filter_logits {kw} == reference"] = bool(jnp.array_equal(got, want))
                tok = np.asarray(jaxnorm.sample(key, x, **kw))
                keep = np.asarray(jaxnorm.reference.sampling_mask(x, **kw))
                checks[f"sample {kw} draws kept tokens"] = bool(np.all(keep[np.arange(16), tok]))
            greedy = jaxnorm.sample(key, x, temperature=0.0)
            checks["greedy == argmax"] = bool(jnp.array_equal(greedy, jnp.argmax(x, axis=-1)))
            for k in (1, 50, 1000):
                checks[f"top_k k={k} == lax.top_k"] = bool(
                    jnp.array_equal(jaxnorm.top_k(x, k)[1], jax.lax.top_k(x, k)[1]))

        failures += _report_checks("sampling", dtype_name, run, width=52)
    return failures


def self_check_cross_entropy() -> int:
    """Softmax cross-entropy: loss and dlogits of every option (a mask, ignored rows) against
    jaxnorm.reference computed in float32 from the same inputs, and that the forward and the
    backward run the jaxnorm kernels."""
    print("\n== self-check of softmax_cross_entropy against jaxnorm.reference")
    failures = 0
    rng = np.random.default_rng(6)
    # Relative to the largest |loss| or |dlogit| (at least 1): float32 sums over the row; bfloat16
    # dlogits carry their rounding (2^-9).
    close = lambda a, b, tol: bool(jnp.max(jnp.abs(jnp.asarray(a, jnp.float32) - jnp.asarray(b, jnp.float32)))  # noqa: E731
                                   <= tol * max(1.0, float(jnp.max(jnp.abs(jnp.asarray(b, jnp.float32))))))
    for dtype_name, tol in (("float32", 1e-5), ("bfloat16", 1e-2)):
        dtype = T.DTYPES[dtype_name]

        def run(checks, dtype=dtype, tol=tol):
            x = jnp.asarray(3 * rng.standard_normal((16, 1003)), dtype)
            labels = jnp.asarray(rng.integers(0, 1003, 16), jnp.int32)
            where = jnp.asarray(rng.random((16, 1003)) < 0.9)
            g = jnp.asarray(rng.standard_normal(16), jnp.float32)
            for name, kw in (("plain", {}), ("smoothing+z_loss+ignore", dict(
                    label_smoothing=0.1, z_loss=1e-3, ignore_index=int(labels[3]))), ("where", dict(where=where))):
                loss = lambda f, x: jnp.sum(f(x, labels, **kw) * g)  # noqa: E731
                got = jax.jit(jax.value_and_grad(lambda x: loss(jaxnorm.softmax_cross_entropy, x)))(x)
                want = jax.value_and_grad(lambda x: loss(reference.softmax_cross_entropy, x))(x.astype(jnp.float32))
                checks[f"softmax_cross_entropy {name} == reference"] = close(
                    jaxnorm.softmax_cross_entropy(x, labels, **kw), reference.softmax_cross_entropy(
                        x.astype(jnp.float32), labels, **kw), tol)
                checks[f"dlogits {name} == reference"] = close(got[1], want[1], tol)
            targets, err = _lowered_targets(
                jax.grad(lambda x: jnp.sum(jaxnorm.softmax_cross_entropy(x, labels))), x)
            checks["grad lowers to jaxnorm_cross_entropy_fwd_v2 + _bwd"] = (
                {"jaxnorm_cross_entropy_fwd_v2", "jaxnorm_cross_entropy_bwd"} <= targets and not err)
            kw = dict(label_smoothing=0.1, ignore_index=int(labels[3]), reduction="mean")
            mean = jax.jit(jax.value_and_grad(lambda x: jaxnorm.softmax_cross_entropy(x, labels, **kw)))
            got = mean(x)
            want = jax.value_and_grad(lambda x: reference.softmax_cross_entropy(x, labels, **kw))(x.astype(jnp.float32))
            checks["reduction='mean' and its dlogits == reference"] = close(got[0], want[0], tol) and close(
                got[1], want[1], tol)
            targets, err = _lowered_targets(mean, x)
            checks["its grad lowers to jaxnorm_cross_entropy_fwd_grad alone"] = (
                "jaxnorm_cross_entropy_fwd_grad" in targets and not err
                and not {"jaxnorm_cross_entropy_fwd_v2", "jaxnorm_cross_entropy_bwd"} & targets)

        failures += _report_checks("cross-entropy", dtype_name, run, width=60)
    return failures


def self_check_padding() -> int:
    """The padding family: lowering, the maps and every copy equal to the reference (exact),
    the round trip, overflow reported, and the gradients of the fused QKV rebuild."""
    print("\n== self-check of padding removal against jaxnorm.reference")
    failures = 0
    rng = np.random.default_rng(2)
    max_len, heads, head_dim = 37, 3, 8
    lengths = jnp.asarray([0, max_len, 5, 20, 13, 1, 30], jnp.int32)
    tokens = int(lengths.sum())
    same = lambda a, b: all(bool(jnp.array_equal(u, v)) for u, v in zip(jax.tree.leaves(a), jax.tree.leaves(b)))
    for dtype_name in ("float32", "bfloat16"):
        dtype = T.DTYPES[dtype_name]

        def run(checks, dtype=dtype):
            for capacity in (tokens + 5, tokens - 9):
                o = jaxnorm.padding_offsets(lengths, max_len, capacity)
                tag = f"capacity {'>' if capacity > tokens else '<'} tokens"
                checks[f"padding_offsets (PaddingOffsets) == reference ({tag})"] = same(
                    o, reference.padding_offsets(lengths, max_len, capacity))
                checks[f"dropped tokens reported ({tag})"] = int(o.dropped) == max(0, tokens - capacity)
                err, _ = checkify.checkify(jaxnorm.check_capacity)(o)
                checks[f"check_capacity raises only on overflow ({tag})"] = (err.get() is not None) == (capacity < tokens)
                x = jnp.asarray(rng.standard_normal((7, max_len, heads * head_dim)), dtype)
                packed = jaxnorm.remove_padding(x, o)
                checks[f"remove/rebuild_padding == reference ({tag})"] = same(
                    packed, reference.remove_padding(x, o)) and same(
                    jaxnorm.rebuild_padding(packed, o), reference.rebuild_padding(packed, o))
                qkv = jnp.asarray(rng.standard_normal((capacity, 3 * heads * head_dim)), dtype)
                bias = jnp.asarray(rng.standard_normal((3 * heads * head_dim,)), jnp.float32)
                for layout in ("BHLD", "BLHD"):
                    parts = jaxnorm.add_qkv_bias_rebuild_padding(qkv, bias, o, heads, layout=layout)
                    checks[f"add_qkv_bias_rebuild_padding {layout} == reference ({tag})"] = same(
                        parts, reference.add_qkv_bias_rebuild_padding(qkv, bias, o, heads, layout=layout))
                    checks[f"transpose_remove_padding {layout} == reference ({tag})"] = same(
                        jaxnorm.transpose_remove_padding(parts[0], o, layout=layout),
                        reference.transpose_remove_padding(parts[0], o, layout=layout))
            o = jaxnorm.padding_offsets(lengths, max_len, tokens)
            loss = lambda f: lambda q, b: sum(jnp.sum(p.astype(jnp.float32) ** 2) for p in f(q, b, o, heads))
            qkv = jnp.asarray(rng.standard_normal((tokens, 3 * heads * head_dim)), dtype)
            got = jax.grad(loss(jaxnorm.add_qkv_bias_rebuild_padding), argnums=(0, 1))(qkv, bias)
            want = jax.grad(loss(reference.add_qkv_bias_rebuild_padding), argnums=(0, 1))(qkv, bias)
            checks["grad of add_qkv_bias_rebuild_padding == reference"] = same(got[0], want[0]) and bool(
                jnp.allclose(got[1], want[1], rtol=1e-5, atol=1e-5))
            targets, err = _lowered_targets(lambda x, l: jaxnorm.remove_padding(
                x, jaxnorm.padding_offsets(l, max_len, tokens)), x, lengths)
            checks["lowers to jaxnorm_pad_offsets + jaxnorm_pad_pack"] = (
                {"jaxnorm_pad_offsets", "jaxnorm_pad_pack"} <= targets and not err)

        failures += _report_checks("padding", dtype_name, run, width=60)
    return failures


def self_check_decoding() -> int:
    """The decoding-step family: decode_attention (attending, appending in place, invalid lengths)
    and embed_with_position (forward and table gradient) against the reference, and lowering."""
    print("\n== self-check of decoding-step ops (decode_attention, embed_with_position) against jaxnorm.reference")
    failures = 0
    rng = np.random.default_rng(3)
    close = lambda a, b, tol: bool(jnp.allclose(jnp.asarray(a, jnp.float32), jnp.asarray(b, jnp.float32),
                                                rtol=tol, atol=tol))
    for dtype_name, tol in (("float32", 1e-5), ("bfloat16", 2e-2)):
        dtype = T.DTYPES[dtype_name]

        def run(checks, dtype=dtype, tol=tol):
            q, k, v = (jnp.asarray(rng.standard_normal(s), dtype) for s in ((3, 8, 64), (3, 2, 300, 64), (3, 2, 300, 64)))
            kn, vn = (jnp.asarray(rng.standard_normal((3, 2, 64)), dtype) for _ in range(2))
            lengths = jnp.asarray([0, 150, 299], jnp.int32)
            checks["decode_attention == reference"] = close(
                jaxnorm.decode_attention(q, k, v, lengths), reference.decode_attention(q, k, v, lengths), tol)
            got = jaxnorm.decode_attention(q, k, v, lengths, k_new=kn, v_new=vn)
            want = reference.decode_attention(q, k, v, lengths, k_new=kn, v_new=vn)
            checks["decode_attention appending == reference"] = close(got[0], want[0], tol)
            checks["appended caches == reference (exact)"] = all(bool(jnp.array_equal(a, b)) for a, b in zip(got[1:], want[1:]))
            bad = jaxnorm.decode_attention(q, k, v, jnp.asarray([-1, 301, 5], jnp.int32))
            checks["invalid lengths give NaN"] = bool(jnp.isnan(bad[:2]).all() & jnp.isfinite(bad[2]).all())
            targets, err = _lowered_targets(lambda *a: jaxnorm.decode_attention(*a), q, k, v, lengths)
            checks["decode_attention lowers to jaxnorm_decode_attention"] = "jaxnorm_decode_attention" in targets and not err
            ids = jnp.asarray(rng.integers(0, 500, size=(4, 9)), jnp.int32)
            table = jnp.asarray(rng.standard_normal((500, 96)), dtype)
            pos = jnp.arange(9)[None, :] + 7
            checks["embed_with_position == reference"] = close(
                jaxnorm.embed_with_position(ids, table, position=pos),
                reference.embed_with_position(ids, table, position=pos), tol)
            loss = lambda f: lambda t: jnp.sum(f(ids, t, position=pos).astype(jnp.float32) ** 2)
            checks["grad of embed_with_position == reference"] = close(
                jax.grad(loss(jaxnorm.embed_with_position))(table), jax.grad(loss(reference.embed_with_position))(table),
                10 * tol)
            targets, err = _lowered_targets(lambda i, t: jaxnorm.embed_with_position(i, t, position=3), ids, table)
            checks["embed_with_position lowers to jaxnorm_embed_fwd"] = "jaxnorm_embed_fwd" in targets and not err

        failures += _report_checks("decoding", dtype_name, run, width=52)
    return failures


def self_check_linear_attention() -> int:
    """Causal linear attention: the forward (two chunks and a bit), every gradient and the
    recurrent step against jaxnorm.reference (computed in float32 from the same inputs), and that
    the forward and the backward run the jaxnorm kernel."""
    print("\n== self-check of causal linear attention against jaxnorm.reference")
    failures = 0
    rng = np.random.default_rng(5)
    f32 = lambda *xs: [x.astype(jnp.float32) for x in xs]  # noqa: E731
    # Relative to the result's largest element: float32 sums of len * d_k terms; bfloat16 rounds
    # phi(q), phi(k) and (on the GPU) the chunk scores and the state, a few 2^-8 each.
    close = lambda a, b, tol: bool(jnp.max(jnp.abs(jnp.asarray(a, jnp.float32) - jnp.asarray(b, jnp.float32)))  # noqa: E731
                                   <= tol * max(1.0, float(jnp.max(jnp.abs(jnp.asarray(b, jnp.float32))))))
    for dtype_name, tol in (("float32", 1e-5), ("bfloat16", 2e-2)):
        dtype = T.DTYPES[dtype_name]

        def run(checks, dtype=dtype, tol=tol):
            q, k = (jnp.asarray(rng.standard_normal((2, 3, 130, 64)), dtype) for _ in range(2))
            v = jnp.asarray(rng.standard_normal((2, 3, 130, 32)), dtype)
            ct = jnp.asarray(rng.standard_normal(v.shape), jnp.float32)
            checks["linear_attention == reference"] = close(
                jax.jit(jaxnorm.linear_attention)(q, k, v), reference.linear_attention(*f32(q, k, v)), tol)
            checks["linear_attention normalize=False == reference"] = close(
                jaxnorm.linear_attention(q, k, v, normalize=False),
                reference.linear_attention(*f32(q, k, v), normalize=False), tol)
            loss = lambda f: lambda q, k, v: jnp.sum(f(q, k, v).astype(jnp.float32) * ct)  # noqa: E731
            got = jax.jit(jax.grad(loss(jaxnorm.linear_attention), argnums=(0, 1, 2)))(q, k, v)
            want = jax.grad(loss(reference.linear_attention), argnums=(0, 1, 2))(*f32(q, k, v))
            for name, g, w in zip("qkv", got, want):
                checks[f"grad d{name} of linear_attention == reference"] = close(g, w, 2 * tol)
            _, state = jaxnorm.linear_attention(q[:, :, :100], k[:, :, :100], v[:, :, :100], return_state=True)
            full = jaxnorm.linear_attention(q, k, v)
            step_ok = True
            for t in range(100, 103):
                out, state = jaxnorm.linear_attention_step(q[:, :, t], k[:, :, t], v[:, :, t], state)
                step_ok &= close(out, full[:, :, t], tol)
            checks["linear_attention_step continues the parallel form"] = step_ok
            targets, err = _lowered_targets(lambda *a: jaxnorm.linear_attention(*a), q, k, v)
            targets_b, err_b = _lowered_targets(jax.grad(loss(jaxnorm.linear_attention), argnums=(0, 1, 2)), q, k, v)
            checks["fwd and grad lower to jaxnorm_linear_attention"] = (
                "jaxnorm_linear_attention" in targets and "jaxnorm_linear_attention" in targets_b
                and not err and not err_b)

        failures += _report_checks("linear attention", dtype_name, run, width=52)
    return failures


# ----------------------------------------------------------------------------------------------
# (c) timing


ROUNDS = 2  # each implementation timed twice, in turn; best median kept


def timing(dtype_name: str | None) -> int:
    backend = jax.default_backend()
    if backend == "cpu":
        shapes = [(256, 1024), (32, 8192)]
        dtype_name = dtype_name or "float32"
        reps, min_time, max_time = 5, 0.0, 0.5
    else:
        shapes = [((1 << 24) // 1024, 1024), ((1 << 24) // 8192, 8192)]
        dtype_name = dtype_name or "bfloat16"
        reps, min_time, max_time = 20, 0.05, 1.0
    impls = T.implementations()
    print(f"\n== timing on {jax.devices()[0].device_kind} ({backend}), {dtype_name}: "
          f"{', '.join(impls)} (speedup = XLA time / jaxnorm time)")
    cols = ["op", "dir", "shape", "N", "jaxnorm", "XLA", "speedup", "jaxnorm BW", "% copy",
            "check"]
    fmt = "{:<11} {:<7} {:>10} {:>2} {:>10} {:>10} {:>7} {:>11} {:>6} {:>5}"
    print(fmt.format(*cols), flush=True)
    failures = 0
    speedups = []

    def on_result(rec):
        nonlocal failures
        if "speedup" in rec:
            speedups.append(rec["speedup"])
        jn, xla = rec["impls"].get("jaxnorm", {}), rec["impls"].get("xla", {})
        mark = T.check_mark(jn) if jn else "ERR"
        failures += mark in ("FAIL", "ERR")
        print(fmt.format(
            rec["op"], rec["direction"], "x".join(map(str, rec["shape"])), rec["n_inputs"],
            T.fmt_time(jn.get("time_s")), T.fmt_time(xla.get("time_s")),
            f"{rec['speedup']:.2f}" if "speedup" in rec else "-", T.fmt_bw(jn.get("bw_Bps")),
            f"{100 * jn['frac_copy']:.0f}" if jn.get("frac_copy") else "-", mark), flush=True)
        for name, r in rec["impls"].items():
            if "error" in r:
                print(f"      {name}: {r['error'][:300]}")
            elif r.get("check", {}).get("pass") is False:
                print(f"      {name}: check failed {r['check']}")
        if "error" in rec:
            print(f"      {rec['error'][:300]}")

    itemsize = np.dtype(T.DTYPES[dtype_name]).itemsize
    for shape in shapes:
        n = T.n_inputs_for(shape[0] * shape[1] * itemsize)
        try:
            over = f"{T.fmt_time(T.call_overhead(n))} per call"
        except Exception as e:
            over = T._err(e, 200)
        print(f"({'x'.join(map(str, shape))}: N = {n} inputs per timed call; fixed host cost "
              f"{over}, included)", flush=True)
        copy, _ = T.run_shape(shape, dtype_name, T.OPS, T.DIRECTIONS, impls, n=n, reps=reps,
                              min_time=min_time, max_time=max_time, on_result=on_result,
                              rounds=ROUNDS)
        if "bw_Bps" in copy:
            print(f"{'':<11} copy    {'x'.join(map(str, shape)):>10} {n:>2} "
                  f"{T.fmt_time(copy['time_s']):>10} {'':>10} {'':>7} {T.fmt_bw(copy['bw_Bps']):>11}")
        else:
            print(f"copy baseline failed: {copy.get('error')}")
    print("Method: " + T.method_text(reps, min_time, max_time, rounds=ROUNDS, backend=backend))
    print(conclusion(speedups, backend))
    return failures


def conclusion(speedups: list[float], backend: str) -> str:
    """What the timing table says, in words, for the machine it ran on."""
    if not speedups:
        return "Conclusion: no timing completed, so nothing to conclude about speed."
    s = sorted(speedups)
    med = s[len(s) // 2] if len(s) % 2 else (s[len(s) // 2 - 1] + s[len(s) // 2]) / 2
    slower = sum(x < 1.0 for x in s)
    text = (f"Conclusion: on this machine ({backend}) jaxnorm ran at {s[0]:.2f}-{s[-1]:.2f}x XLA's "
            f"speed for the same jax.numpy ops (median {med:.2f}x; > 1 is faster), slower than XLA "
            f"in {slower} of {len(s)} timings.")
    if backend == "cpu":
        text += (" These are single timings of ~1 MB inputs: on a shared or busy machine they move "
                 "by up to 2x between runs, so read a ratio near 1 as a tie. They time the ops in "
                 "programs with other work, as in a model; a program of jaxnorm calls alone (one op "
                 "called eagerly, outside a larger jit) runs inline on the calling thread, where "
                 "freshly mapped outputs can make a 1 MB call 2-4x slower. "
                 "benchmarks/bench_cpu.py measures same-run ratios over more shapes, and the README "
                 "states what was measured on a 2-core machine.")
    return text


def self_check_transforms() -> int:
    """Forward-mode AD and jax.export: the jvp of layer_norm and softmax against the reference's,
    and a function exported with jaxnorm.export_checks() called back (no serialization, which
    needs flatbuffers: tests/test_export.py covers it)."""
    print("\n== self-check of transforms (jax.jvp, jax.export) against jaxnorm.reference")
    rng = np.random.default_rng(4)
    x, dx = (jnp.asarray(rng.standard_normal((6, 96)), jnp.float32) for _ in range(2))
    s, b = jnp.asarray(rng.uniform(0.5, 1.5, 96), jnp.float32), jnp.asarray(rng.standard_normal(96), jnp.float32)
    close = lambda a, e: bool(jnp.allclose(a, e, rtol=1e-5, atol=1e-5))

    def run(checks):
        for name, fn, ref in (("layer_norm", lambda x: jaxnorm.layer_norm(x, s, b), lambda x: reference.layer_norm(x, s, b)),
                              ("softmax", jaxnorm.softmax, reference.softmax)):
            checks[f"jax.jvp of {name} == reference's"] = close(jax.jvp(fn, (x,), (dx,))[1], jax.jvp(ref, (x,), (dx,))[1])
        f = lambda x: jax.grad(lambda x: jnp.sum(jnp.sin(jaxnorm.layer_norm(x, s, b))))(x)
        exported = jax.export.export(jax.jit(f), disabled_checks=jaxnorm.export_checks())(x)
        checks["jax.export with export_checks(), called back"] = close(exported.call(x), f(x))

    return _report_checks("transforms", "float32", run, width=46)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m jaxnorm",
        description="Environment report, self-check of every op against jaxnorm.reference, and a "
                    "small timing table of jaxnorm against XLA on this machine's default device "
                    "(CPU or GPU), ending with what it means: jaxnorm's speed relative to XLA's code "
                    "for the same jax.numpy ops on this machine.")
    p.add_argument("--no-bench", action="store_true", help="skip the timing table")
    p.add_argument("--no-check", action="store_true", help="skip the self-check")
    p.add_argument("--dtype", choices=["float32", "bfloat16"],
                   help="dtype of the timing table (default: float32 on CPU, bfloat16 on GPU)")
    args = p.parse_args(argv)
    t0 = time.perf_counter()
    failures = report_environment()
    if not args.no_check:
        failures += self_check()
        failures += self_check_cross_entropy()
        failures += self_check_sampling()
        failures += self_check_padding()
        failures += self_check_decoding()
        failures += self_check_linear_attention()
        failures += self_check_transforms()
    if not args.no_bench:
        failures += timing(args.dtype)
    print(f"\n{'FAILED' if failures else 'OK'}: {failures} failure(s), "
          f"{time.perf_counter() - t0:.1f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
