"""`jax.export` of functions that use jaxnorm: serialized here, deserialized and called in a fresh
process that only imports jaxnorm (as a serving process would), and compared with the results of
this process. The artifacts: export_program.py's function (every FFI target, with gradients and
vmapped calls inside), a function exported with its VJP and differentiated over there, and the
same function exported for CPU and CUDA at once (needs the CUDA handlers, not a GPU); and an
export sharded over 4 host devices."""

import json
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import jax
import jax.numpy as jnp
from jax import export

import jaxnorm
from jaxnorm import _ffi
from jaxnorm._ops import TARGETS

from export_program import inputs, program

# Runs in the fresh process: calls each artifact listed in the manifest (first once before
# importing jaxnorm, to record how that fails), writes the results next to it.
SCRIPT = textwrap.dedent(
    """
    import json, pathlib, sys
    import numpy as np
    import jax, jax.numpy as jnp
    from jax import export

    d = pathlib.Path(sys.argv[1])
    a = dict(np.load(d / "inputs.npz"))
    manifest = json.loads((d / "manifest.json").read_text())
    load = lambda name: export.deserialize(bytearray((d / f"{name}.bin").read_bytes()))
    try:
        load("program").call(a)
        (d / "without_import.txt").write_text("ran")
    except Exception as e:
        (d / "without_import.txt").write_text(str(e))

    import jaxnorm  # registers the handlers with XLA: all a serving process needs

    for name, kind in manifest.items():
        exp = load(name)
        if kind == "call":
            out = exp.call(a)
        else:  # exported with its VJP: differentiate the deserialized function
            loss = lambda x, s, b: jnp.sum(jnp.sin(exp.call(x, s, b)))
            out = dict(zip(("dx", "dscale", "dbias"), jax.jit(jax.grad(loss, (0, 1, 2)))(a["x"], a["scale"], a["bias"])))
        np.savez(d / f"out_{name}.npz", **{k: np.asarray(v) for k, v in out.items()})
    print("export ok")
    """
)


def _needs_serialization():
    pytest.importorskip("flatbuffers", reason="jax.export serializes with flatbuffers: pip install -e '.[test]'")


def _layer_softmax(x, s, b):
    return jaxnorm.softmax(jaxnorm.layer_norm(x, s, b))


def _loss(x, s, b):
    return jnp.sum(jnp.sin(_layer_softmax(x, s, b)))


def _export(fn, args, **kw):
    return export.export(jax.jit(fn), disabled_checks=jaxnorm.export_checks(), **kw)(*args)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """Exports the artifacts, runs them in a fresh process, returns (inputs, results by name, the
    error of the call made before importing jaxnorm)."""
    _needs_serialization()
    d = tmp_path_factory.mktemp("export")
    a = inputs(np.random.default_rng(0))  # any values: what is tested is that they survive the trip
    artifacts = {"program": (_export(program, (a,)), "call"),
                 "layer_softmax_vjp": (_export(_layer_softmax, (a["x"], a["scale"], a["bias"])), "grad")}
    if jaxnorm.cuda_built():
        artifacts["program_cpu_cuda"] = (_export(program, (a,), platforms=("cpu", "cuda")), "call")
    for name, (exp, kind) in artifacts.items():
        (d / f"{name}.bin").write_bytes(exp.serialize(vjp_order=1 if kind == "grad" else 0))
    (d / "manifest.json").write_text(json.dumps({name: kind for name, (_, kind) in artifacts.items()}))
    np.savez(d / "inputs.npz", **a)

    out = subprocess.run([sys.executable, "-c", SCRIPT, str(d)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "export ok" in out.stdout, out.stdout[-2000:] + out.stderr[-4000:]
    results = {name: dict(np.load(d / f"out_{name}.npz")) for name in artifacts}
    return a, results, (d / "without_import.txt").read_text()


def _assert_same(actual: dict, expected: dict):
    assert set(actual) == set(expected)
    for k, e in expected.items():
        a, e = np.asarray(actual[k]), np.asarray(e)
        assert a.dtype == e.dtype and a.shape == e.shape, k
        if np.issubdtype(e.dtype, np.integer):
            np.testing.assert_array_equal(a, e, err_msg=k)
        else:  # the same kernels; only XLA's code around them may be scheduled differently
            np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-6 * max(1.0, np.abs(e[np.isfinite(e)]).max(initial=0)),
                                       err_msg=k)


def test_program_runs_in_a_fresh_process(run):
    a, results, _ = run
    _assert_same(results["program"], jax.jit(program)(a))


def test_deserialized_function_differentiates(run):
    a, results, _ = run
    expected = jax.grad(_loss, (0, 1, 2))(a["x"], a["scale"], a["bias"])
    _assert_same(results["layer_softmax_vjp"], dict(zip(("dx", "dscale", "dbias"), expected)))


def test_fresh_process_needs_jaxnorm_imported(run):
    # The artifact names the targets; the handlers come from importing jaxnorm.
    _, _, error = run
    assert re.search(r"No FFI handler registered for jaxnorm_\w+", error), error


@pytest.mark.skipif(not jaxnorm.cuda_built(), reason="the CUDA handlers are not built")
def test_cpu_and_cuda_artifact_runs_here(run):
    a, results, _ = run
    _assert_same(results["program_cpu_cuda"], jax.jit(program)(a))


def test_export_needs_the_checks():
    # Without them jax.export refuses every jaxnorm custom call (and lists each one).
    a = inputs(np.random.default_rng(0))
    with pytest.raises(ValueError, match="custom calls whose targets have no compatibility guarantees") as e:
        export.export(jax.jit(program))(a)
    assert set(re.findall(r"custom_call @(jaxnorm_\w+)", str(e.value))) == set(TARGETS)


def test_cuda_export_without_cuda_handlers_says_so(monkeypatch):
    monkeypatch.setattr(_ffi, "_cuda", None)
    monkeypatch.setattr(_ffi, "_cuda_error", ImportError("not built (simulated)"))
    x = jnp.ones((4, 32), jnp.float32)
    # A new function object: jit must lower it afresh rather than reuse a cached lowering.
    with pytest.raises(RuntimeError, match="without its CUDA handlers"):
        _export(lambda x: jaxnorm.rms_norm(x), (x,), platforms=("cpu", "cuda"))
    assert _export(lambda x: jaxnorm.rms_norm(x), (x,), platforms=("cpu",)).platforms == ("cpu",)


# Serving on several devices: the artifact records the shardings and runs on as many devices.
SHARDED_SCRIPT = textwrap.dedent(
    """
    import numpy as np
    import jax, jax.numpy as jnp
    from jax import export
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    import jaxnorm
    from jaxnorm import reference

    mesh = Mesh(np.array(jax.devices()), ("b",))
    rows = NamedSharding(mesh, P("b"))
    x = jax.device_put(np.random.default_rng(0).normal(size=(8, 16, 96)).astype(np.float32), rows)
    s = jnp.linspace(0.5, 1.5, 96, dtype=jnp.float32)
    loss = lambda x, s: jnp.sum(jnp.sin(jaxnorm.layer_norm(x, s)))
    in_jit = lambda x, s: (jaxnorm.layer_norm(x, s), jax.grad(loss, (0, 1))(x, s))
    in_shard_map = jax.shard_map(lambda x, s: jaxnorm.layer_norm(x, s), mesh=mesh, in_specs=(P("b"), P()), out_specs=P("b"))
    ref_loss = lambda x, s: jnp.sum(jnp.sin(reference.layer_norm(x, s)))
    want = (reference.layer_norm(x, s), jax.grad(ref_loss, (0, 1))(x, s))
    for name, fn, expected in (("jit", in_jit, want), ("shard_map", in_shard_map, want[0])):
        exp = export.export(jax.jit(fn, in_shardings=(rows, None)), disabled_checks=jaxnorm.export_checks())(x, s)
        assert exp.nr_devices == 4, (name, exp.nr_devices)
        out = export.deserialize(exp.serialize()).call(x, s)
        for a, e in zip(jax.tree.leaves(out), jax.tree.leaves(expected)):
            err = np.abs(np.asarray(a, np.float64) - np.asarray(e, np.float64)).max()
            assert err < 1e-4, (name, err)
    print("sharded export ok")
    """
)


def test_sharded_export_on_four_host_devices():
    _needs_serialization()
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_force_host_platform_device_count=4")
    out = subprocess.run([sys.executable, "-c", SHARDED_SCRIPT], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0 and "sharded export ok" in out.stdout, out.stdout[-2000:] + out.stderr[-4000:]
