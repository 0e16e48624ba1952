"""jaxnorm under sharding, on 4 forced host devices (a subprocess, so it runs on any machine):
jit over a sharded input, and shard_map over the batch axis with gradients.

The primitives do not yet propagate shard_map's varying-manual-axes types, so shard_map needs
check_vma=False (README, Limitations); this test pins that the results are then correct."""

import os
import subprocess
import sys
import textwrap

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
    for op, ref, params in cases:
        f = jax.shard_map(lambda x, *p, op=op: op(x, *p), mesh=mesh,
                          in_specs=(P("b"),) + (P(),) * len(params), out_specs=P("b"), check_vma=False)
        close(jax.jit(f)(x, *params), ref(x, *params), op.__name__)
        argnums = tuple(range(1 + len(params)))
        loss = lambda g: (lambda x, *p: jnp.sum(jnp.sin(g(x, *p))))
        grads = jax.jit(jax.grad(loss(f), argnums))(x, *params)
        grads_ref = jax.grad(loss(ref), argnums)(x, *params)
        for i, (a, e) in enumerate(zip(grads, grads_ref)):
            close(a, e, f"{op.__name__} grad {i}")
    print("sharding ok")
    """
)


def test_jit_and_shard_map_on_four_host_devices():
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_force_host_platform_device_count=4")
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0 and "sharding ok" in out.stdout, out.stdout[-2000:] + out.stderr[-4000:]
