"""jaxnorm under sharding, on 4 forced host devices (a subprocess, so it runs on any machine):
jit over a sharded input, and shard_map over the batch axis with gradients, with shard_map's
varying-axes type checks on (the default) and off. With them on, the replicated scale/bias are
cast to varying before the op, so their gradients are summed over the batch shards, and a
result that varies cannot be returned as replicated."""

import os
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent(
    """
    import numpy as np
    import jax, jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    import jaxnorm
    from jaxnorm import reference

    assert len(jax.devices()) == 4, jax.devices()
    mesh = Mesh(np.array(jax.devices()), ("b",))
    rng = np.random.default_rng()
    x = jnp.asarray(rng.normal(size=(8, 16, 96)), jnp.float32)
    s = jnp.asarray(rng.uniform(0.5, 1.5, size=96), jnp.float32)
    b = jnp.asarray(rng.normal(size=96), jnp.float32)

    def close(a, e, what):
        a, e = np.asarray(a, np.float64), np.asarray(e, np.float64)
        err = np.abs(a - e).max() / max(1.0, np.abs(e).max())
        assert err < 1e-5, (what, err)

    xs = jax.device_put(x, NamedSharding(mesh, P("b")))
    close(jax.jit(jaxnorm.layer_norm)(xs, s, b), reference.layer_norm(x, s, b), "jit on sharded x")

    cases = [
        (jaxnorm.layer_norm, reference.layer_norm, (s, b)),
        (jaxnorm.rms_norm, reference.rms_norm, (s,)),
        (jaxnorm.softmax, reference.softmax, ()),
        (jaxnorm.log_softmax, reference.log_softmax, ()),
    ]
    for check_vma in (True, False):
        for op, ref, params in cases:
            what = f"{op.__name__} check_vma={check_vma}"
            f = jax.shard_map(lambda x, *p, op=op: op(x, *p), mesh=mesh,
                              in_specs=(P("b"),) + (P(),) * len(params), out_specs=P("b"), check_vma=check_vma)
            close(jax.jit(f)(x, *params), ref(x, *params), what)
            argnums = tuple(range(1 + len(params)))
            loss = lambda g: (lambda x, *p: jnp.sum(jnp.sin(g(x, *p))))
            grads = jax.jit(jax.grad(loss(f), argnums))(x, *params)
            grads_ref = jax.grad(loss(ref), argnums)(x, *params)
            for i, (a, e) in enumerate(zip(grads, grads_ref)):
                close(a, e, f"{what} grad {i}")

    # A sharded mask, and the memory-efficient LayerNorm, with the type checks on.
    m = jnp.asarray(rng.uniform(size=x.shape) < 0.7)
    f = jax.shard_map(lambda x, m: jaxnorm.softmax(x, where=m), mesh=mesh, in_specs=(P("b"), P("b")), out_specs=P("b"))
    close(jax.jit(f)(x, m), reference.softmax(x, where=m), "masked softmax")
    g = jax.grad(lambda x, s, b: jnp.sum(jnp.sin(jax.shard_map(
        lambda x, s, b: jaxnorm.layer_norm(x, s, b, memory_efficient=True), mesh=mesh,
        in_specs=(P("b"), P(), P()), out_specs=P("b"))(x, s, b))), (0, 1, 2))
    g_ref = jax.grad(lambda x, s, b: jnp.sum(jnp.sin(reference.layer_norm(x, s, b))), (0, 1, 2))
    for i, (a, e) in enumerate(zip(jax.jit(g)(x, s, b), g_ref(x, s, b))):
        close(a, e, f"memory-efficient layer_norm grad {i}")

    # A mesh of Explicit axes (jax.make_mesh's default), the input sharded along each axis in turn:
    # along the sequence axis the merge into rows has no sharding of its own, and is gathered.
    emesh = jax.make_mesh((4,), ("e",), axis_types=(jax.sharding.AxisType.Explicit,))
    lab = jnp.asarray(rng.integers(0, 96, size=(8, 16)), jnp.int32)
    for spec in (P("e"), P(None, "e"), P(None, None, "e")):
        put = lambda a, spec=spec: jax.device_put(a, NamedSharding(emesh, P(*spec[: a.ndim])))
        xe, re_ = put(x), put(x * 0.5)
        what = f"explicit {spec}"
        close(jax.jit(jaxnorm.layer_norm)(xe, s, b), reference.layer_norm(x, s, b), what)
        close(jax.jit(jaxnorm.log_softmax)(xe), reference.log_softmax(x), what)
        y, h = jax.jit(lambda x, r: jaxnorm.rms_norm(x, s, residual=r))(xe, re_)
        y_ref, h_ref = reference.rms_norm(x, s, residual=x * 0.5)
        close(y, y_ref, what + " residual y"), close(h, h_ref, what + " residual h")
        grad = jax.jit(jax.grad(lambda x: jnp.sum(jnp.sin(jaxnorm.layer_norm(x, s, b)))))(xe)
        close(grad, jax.grad(lambda x: jnp.sum(jnp.sin(reference.layer_norm(x, s, b))))(x), what + " grad")
        ce = lambda x, l: jaxnorm.softmax_cross_entropy(x, l, reduction="mean")
        loss, dx = jax.jit(jax.value_and_grad(ce))(xe, put(lab))
        ce_ref = lambda x: reference.softmax_cross_entropy(x, lab, reduction="mean")
        close(loss, ce_ref(x), what + " cross-entropy"), close(dx, jax.grad(ce_ref)(x), what + " cross-entropy grad")
        keys = jax.random.split(jax.random.key(1), 8 * 16).reshape(8, 16)
        tokens = jax.jit(lambda k, x: jaxnorm.sample(k, x, top_k=5))(put(keys), xe)
        assert (np.asarray(tokens) == np.asarray(jaxnorm.sample(keys, x, top_k=5))).all(), what + " sample"
        close(jax.jit(lambda x: jaxnorm.top_k(x, 4)[0])(xe), jax.lax.top_k(x, 4)[0], what + " top_k")
        g_top = jax.jit(jax.grad(lambda x: jnp.sum(jnp.sin(jaxnorm.top_k(x, 4)[0]))))(xe)
        close(g_top, jax.grad(lambda x: jnp.sum(jnp.sin(jax.lax.top_k(x, 4)[0])))(x), what + " top_k grad")

    # The other families on that mesh, each axis sharded in turn, against the same jitted call on
    # unsharded input: heads merged with the batch (linear attention), ids merged into tokens
    # (embedding), the sorts and contractions that need a whole axis.
    def same(f, args, what):
        for a, e in zip(jax.tree.leaves(jax.jit(f)(*args)), jax.tree.leaves(jax.jit(f)(*map(np.asarray, args)))):
            close(a, e, what)
    qa = jnp.asarray(rng.normal(size=(4, 4, 32, 64)), jnp.float32)
    ids = jnp.asarray(rng.integers(0, 100, size=(8, 16)), jnp.int32)
    table, pos_table = (jnp.asarray(rng.normal(size=(n, 64)), jnp.float32) for n in (100, 16))
    lens = jnp.asarray([3, 16, 0, 9, 1, 7, 16, 2], jnp.int32)
    def padded_round_trip(x, l):
        o = jaxnorm.padding_offsets(l, 16, 128)
        return jnp.sin(jaxnorm.rebuild_padding(jaxnorm.remove_padding(x, o), o)).sum()
    for spec in (P("e"), P(None, "e"), P(None, None, "e"), P(None, None, None, "e")):
        put = lambda a, spec=spec: jax.device_put(a, NamedSharding(emesh, P(*spec[: a.ndim])))
        what = f"explicit {spec}"
        qe = put(qa)
        for layout in ("BHLD", "BLHD"):
            same(lambda q: jaxnorm.linear_attention(q, q * 0.5, q, layout=layout), (qe,), f"{what} linear_attention {layout}")
        same(jax.grad(lambda q: jnp.sum(jnp.sin(jaxnorm.linear_attention(q, q * 0.5, q)))), (qe,), what + " linear_attention grad")
        same(lambda q: jaxnorm.linear_attention(q, q, q, causal=False), (qe,), what + " linear_attention non-causal")
        state = lambda q: jaxnorm.linear_attention(q, q, q, return_state=True)[1]  # noqa: E731
        same(state, (qe,), what + " linear_attention state")
        q1 = put(qa[:, :, 0])
        same(lambda q1, q: jaxnorm.linear_attention_step(q1, q1, q1, state(q)), (q1, qe), what + " linear_attention_step")
        if len(spec) <= 3:
            kv, q3 = put(qa), put(qa[:, :, 0])
            same(lambda q, k, l: jaxnorm.decode_attention(q, k, k, l), (q3, kv, put(lens[:4])), what + " decode_attention")
            same(lambda q, k, l: jaxnorm.decode_attention(q, k, k, l, k_new=q, v_new=q), (q3, kv, put(lens[:4])),
                 what + " decode_attention append")
            same(jax.grad(padded_round_trip), (put(x), put(lens)), what + " padding round trip grad")
        if len(spec) <= 2:
            pos = put(jnp.broadcast_to(jnp.arange(16), (8, 16)))
            embed = lambda t, pt, i, p: jnp.sin(jaxnorm.embed_with_position(i, t, position=p, pos_table=pt)).sum()  # noqa: E731
            same(jax.value_and_grad(embed, (0, 1)), (table, pos_table, put(ids), pos), what + " embed_with_position")

    # A result that varies over "b" cannot claim to be replicated.
    bad = jax.shard_map(lambda x: jaxnorm.rms_norm(x), mesh=mesh, in_specs=P("b"), out_specs=P())
    try:
        jax.jit(bad)(x)
    except Exception as e:
        assert "vary" in str(e).lower() or "out_specs" in str(e), e
    else:
        raise AssertionError("a varying result was accepted as replicated")
    print("sharding ok")
    """
)


def test_jit_and_shard_map_on_four_host_devices():
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_force_host_platform_device_count=4")
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0 and "sharding ok" in out.stdout, out.stdout[-2000:] + out.stderr[-4000:]


JIT_SCRIPT = textwrap.dedent(
    """
    import re, sys
    import numpy as np
    import jax, jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    import jaxnorm
    from jaxnorm import reference

    jax.config.update("jax_use_shardy_partitioner", sys.argv[1] == "shardy")
    mesh = Mesh(np.array(jax.devices()).reshape(2, 2), ("b", "s"))
    rng = np.random.default_rng()
    rows = NamedSharding(mesh, P(("b", "s")))  # the leading axis over all 4 devices
    x = jax.device_put(jnp.asarray(rng.normal(size=(8, 6, 96)), jnp.float32), rows)
    s = jnp.asarray(rng.uniform(0.5, 1.5, size=96), jnp.float32)
    b = jnp.asarray(rng.normal(size=96), jnp.float32)
    ids = jax.device_put(jnp.asarray(rng.integers(0, 50, size=(8, 6)), jnp.int32), rows)
    table = jnp.asarray(rng.normal(size=(50, 32)), jnp.float32)
    loss = lambda g: (lambda x, *p: jnp.sum(jnp.sin(g(x, *p))))

    def check(what, f, ref, *args, reduce_ok=()):
        compiled = jax.jit(f).lower(*args).compile().as_text()
        assert "all-gather" not in compiled and "all-to-all" not in compiled, (what, "gathers")
        # The only all-reduces allowed: the [C]-sized scale/bias gradient sums.
        for line in compiled.splitlines():
            if " all-reduce(" in line or "all-reduce-start(" in line:
                assert any(shape in line.split("=")[1].split("all-reduce")[0] for shape in reduce_ok), (what, line)
        got, want = jax.jit(f)(*args), ref(*args)
        for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
            err = np.abs(np.asarray(g, np.float64) - np.asarray(w, np.float64)).max()
            assert err < 1e-5 * max(1.0, np.abs(np.asarray(w)).max()), (what, err)
        first = jax.tree.leaves(got)[0]
        assert first.sharding.spec[0] == ("b", "s"), (what, first.sharding)

    cases = [
        (jaxnorm.layer_norm, reference.layer_norm, (s, b)),
        (jaxnorm.rms_norm, reference.rms_norm, (s,)),
        (jaxnorm.softmax, reference.softmax, ()),
        (jaxnorm.log_softmax, reference.log_softmax, ()),
    ]
    for op, ref, params in cases:
        check(op.__name__, op, ref, x, *params)
        argnums = tuple(range(1 + len(params)))
        check(op.__name__ + " grad", jax.grad(loss(op), argnums), jax.grad(loss(ref), argnums), x, *params,
              reduce_ok=("f32[96]", "f32[1,96]"))
    # Cross-entropy: the per-row loss and dlogits stay with their rows.
    ce_labels = jax.device_put(jnp.asarray(rng.integers(0, 96, size=(8, 6)), jnp.int32), rows)
    ce = lambda x, y: jaxnorm.softmax_cross_entropy(x, y, label_smoothing=0.1, ignore_index=3)
    ce_ref = lambda x, y: reference.softmax_cross_entropy(x, y, label_smoothing=0.1, ignore_index=3)
    check("softmax_cross_entropy", ce, ce_ref, x, ce_labels)
    check("softmax_cross_entropy grad", jax.grad(loss(ce)), jax.grad(loss(ce_ref)), x, ce_labels)
    mean = lambda f: lambda x, y: f(x, y, label_smoothing=0.1, ignore_index=3, reduction="mean")  # noqa: E731
    check("softmax_cross_entropy reduced grad", jax.grad(mean(jaxnorm.softmax_cross_entropy)),
          jax.grad(mean(reference.softmax_cross_entropy)), x, ce_labels, reduce_ok=("f32[]", "s32[]", "s64[]"))
    me = lambda x, s, b: jaxnorm.layer_norm(x, s, b, memory_efficient=True)
    check("memory-efficient grad", jax.grad(loss(me), (0, 1, 2)), jax.grad(loss(reference.layer_norm), (0, 1, 2)),
          x, s, b, reduce_ok=("f32[96]", "f32[1,96]"))
    check("top_k", lambda x: jaxnorm.top_k(x, 5), lambda x: jax.lax.top_k(x, 5), x)
    check("embed_with_position", lambda i: jaxnorm.embed_with_position(i, table, position=3),
          lambda i: reference.embed_with_position(i, table, position=3), ids)
    # Decode attention over caches sharded by sequence, appending in place with donated caches:
    # no gather, and no copy of a cache (local [2, ...] or global [8, ...]).
    bsz, hkv, max_len, d = 8, 2, 40, 64
    q = jax.device_put(jnp.asarray(rng.normal(size=(bsz, 8, d)), jnp.float32), rows)
    kc, vc = (jax.device_put(jnp.asarray(rng.normal(size=(bsz, hkv, max_len, d)), jnp.float32), rows) for _ in "kv")
    kn, vn = (jax.device_put(jnp.asarray(rng.normal(size=(bsz, hkv, d)), jnp.float32), rows) for _ in "kv")
    lengths = jax.device_put(jnp.asarray(rng.integers(0, max_len, size=bsz), jnp.int32), rows)
    check("decode_attention", jaxnorm.decode_attention, reference.decode_attention, q, kc, vc, lengths)
    step = lambda kc, vc, q, l, kn, vn: jaxnorm.decode_attention(q, kc, vc, l, k_new=kn, v_new=vn)
    want = reference.decode_attention(q, kc, vc, lengths, k_new=kn, v_new=vn)
    donated = jax.jit(step, donate_argnums=(0, 1))
    compiled = donated.lower(kc, vc, q, lengths, kn, vn).compile().as_text()
    assert "all-gather" not in compiled, "decode append gathers"
    assert not [l for l in compiled.splitlines() if " copy(" in l and f",{hkv},{max_len},{d}]" in l], "cache copied"
    got = donated(kc, vc, q, lengths, kn, vn)
    for g, w in zip(got, want):
        assert np.abs(np.asarray(g, np.float64) - np.asarray(w, np.float64)).max() < 1e-5
        assert g.sharding.spec[0] == ("b", "s"), g.sharding
    # Causal linear attention, batch sharded: each device runs the kernel (and, in the gradient,
    # its three transposed launches) on its own rows.
    lq, lk, lv = (jax.device_put(jnp.asarray(rng.normal(size=(8, 2, 40, 32)), jnp.float32), rows) for _ in "qkv")
    check("linear_attention", jaxnorm.linear_attention, reference.linear_attention, lq, lk, lv)
    check("linear_attention grad", jax.grad(loss(jaxnorm.linear_attention), (0, 1, 2)),
          jax.grad(loss(reference.linear_attention), (0, 1, 2)), lq, lk, lv)
    # Sampling: filter_logits always, sample with a key per row, each device on its own rows and
    # bit-equal to the unsharded call; one key shared by the batch numbers rows globally, so that
    # call is not split (XLA gathers) and still equals the unsharded tokens.
    def no_gather(what, f, *args):
        compiled = jax.jit(f).lower(*args).compile().as_text()
        assert "all-gather" not in compiled and "all-to-all" not in compiled, (what, "gathers")
        assert " all-reduce(" not in compiled and "all-reduce-start(" not in compiled, (what, "reduces")

    def same(what, got, want):
        assert np.array_equal(np.asarray(got), np.asarray(want)), what
        assert got.sharding.spec[0] == ("b", "s"), (what, got.sharding)

    local = lambda a: jnp.asarray(np.asarray(a))  # the same values on one device
    k_rows = jax.device_put(jnp.asarray(rng.integers(1, 30, size=(8, 6)), jnp.int32), rows)
    p_rows = jax.device_put(jnp.asarray(rng.uniform(0.3, 1.0, size=(8, 6)), jnp.float32), rows)
    filt = lambda x, k, p: jaxnorm.filter_logits(x, top_k=k, top_p=p, min_p=0.05)
    no_gather("filter_logits", filt, x, k_rows, p_rows)
    same("filter_logits", jax.jit(filt)(x, k_rows, p_rows), filt(local(x), local(k_rows), local(p_rows)))
    keys = jax.device_put(jax.random.split(jax.random.key(7), 48).reshape(8, 6), rows)
    samp = lambda key, x, k: jaxnorm.sample(key, x, temperature=0.8, top_k=k, top_p=0.9)
    no_gather("sample, a key per row", samp, keys, x, k_rows)
    same("sample, a key per row", jax.jit(samp)(keys, x, k_rows),
         samp(jax.random.wrap_key_data(local(jax.random.key_data(keys))), local(x), local(k_rows)))
    # the logits update: the bias replicated, the finished flags and end ids with their rows
    vb = jnp.asarray(rng.normal(size=x.shape[-1]), jnp.float32)
    fin_rows = jax.device_put(jnp.asarray(rng.random((8, 6)) < 0.4), rows)
    end_rows = jax.device_put(jnp.asarray(rng.integers(0, x.shape[-1], size=(8, 6)), jnp.int32), rows)
    upd = lambda key, x, f, e: jaxnorm.sample(key, x, top_k=10, bias=vb, finished=f, end_id=e)
    no_gather("sample with the logits update", upd, keys, x, fin_rows, end_rows)
    same("sample with the logits update", jax.jit(upd)(keys, x, fin_rows, end_rows),
         upd(jax.random.wrap_key_data(local(jax.random.key_data(keys))), local(x), local(fin_rows), local(end_rows)))
    one = jax.random.key(3)
    got = jax.jit(lambda x: jaxnorm.sample(one, x, top_k=10))(x)
    assert np.array_equal(np.asarray(got), np.asarray(jaxnorm.sample(one, local(x), top_k=10))), "sample, one key"
    print("jit sharding ok")
    """
)


@pytest.mark.parametrize("partitioner", ["shardy", "gspmd"])
def test_jit_over_sharded_rows_runs_on_local_rows(partitioner):
    """Under plain jit, rows sharded over 4 devices stay where they are: no all-gather, and the
    norm backward's only collective is the all-reduce of the [C] scale/bias gradients."""
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_force_host_platform_device_count=4")
    out = subprocess.run([sys.executable, "-c", JIT_SCRIPT, partitioner], capture_output=True, text=True, env=env,
                         timeout=300)
    assert out.returncode == 0 and "jit sharding ok" in out.stdout, out.stdout[-2000:] + out.stderr[-4000:]
