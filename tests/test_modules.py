"""The framework modules (jaxnorm.flax, jaxnorm.nnx, jaxnorm.equinox) against the frameworks' own:
parameters made by one drive the other, with equal outputs and gradients. Skipped per framework
when it is not installed (CI installs both extras)."""

from __future__ import annotations

import dataclasses
import io
import math
import re
import subprocess
import sys

import numpy as np
import pytest

import jax
import jax.numpy as jnp

import jaxnorm
from cases import BF16, F32

KINDS = ("LayerNorm", "RMSNorm")


def _half(a):
    return np.dtype(a.dtype) != F32


def assert_close(actual, expected, atol=2.0**-17):
    """|actual - expected| <= atol * M (+ one unit in the last place of a 16-bit result), M the
    largest expected magnitude."""
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    a, e = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    rtol = 2.0**-7 if _half(expected) else 0.0
    np.testing.assert_allclose(a, e, rtol=rtol, atol=atol * max(1.0, np.abs(e).max()))


def assert_same_results(actual, expected, memory_efficient=False):
    """(y, (parameter gradients, x gradient)) of two modules on the same values.

    float32: both sides compute in float32 but sum in different orders (flax: XLA's tree in
    float32; jaxnorm: double on CPU, Chan merges on GPU), and flax's default variance
    E[x^2] - E[x]^2 cancels by up to E[x^2] / var ~ 5 for this data: ~ 5 log2(C) u with
    u = 2^-24 on the statistics, a few u more per later operation, and gradients sum up to 48 rows
    besides; 2^-17 M leaves ~4x headroom (measured: up to 0.2 of it). A 16-bit result is rounded
    from float32 values that differ by that much, so it may differ by one unit in its last place
    (2^-7 relative, bfloat16). Two 16-bit cases are exact only to a unit of the largest term of a
    sum, which may exceed M: flax's gradient in a 16-bit x adds two cotangents each rounded to x's
    dtype (x is used raw and cast for the statistics; jaxnorm rounds dx once), and memory-efficient
    mode with a 16-bit result recovers x_hat from y rounded to 16 bits and divided by
    |scale| >= 0.5 (README), its gradient terms summed over 48 rows: 2^-6 M (measured: up to 0.5
    of it)."""
    (y, (dp, dx)), (y_e, (dp_e, dx_e)) = actual, expected
    assert_close(y, y_e)
    loose = 2.0**-6
    grads = loose if memory_efficient and _half(y_e) else 2.0**-17
    assert jax.tree.structure(dp) == jax.tree.structure(dp_e)
    for g, g_e in zip(jax.tree.leaves(dp), jax.tree.leaves(dp_e)):
        assert_close(g, g_e, grads)
    assert_close(dx, dx_e, loose if _half(dx_e) else grads)


def make_input(rng, shape, dtype):
    # An offset and spread per tensor, so that centering and scaling both matter.
    return jnp.asarray(rng.normal(rng.uniform(-1, 1), rng.uniform(0.5, 2), shape), dtype)


def randomize(rng, params):
    """Parameters of magnitude 0.5 to 1.5, random sign: ones and zeros (the initializers') would
    hide a scale or bias applied wrongly, and memory-efficient mode divides by the scale."""
    return jax.tree.map(
        lambda p: jnp.asarray(rng.uniform(0.5, 1.5, p.shape) * rng.choice([-1, 1], p.shape), p.dtype), params)


@dataclasses.dataclass(frozen=True)
class Config:
    """A module configuration, in words every framework can express, and the input's dtype."""

    x_dtype: object = F32
    use_scale: bool = True
    use_bias: bool = True
    param_dtype: object = F32
    axes: int = 1  # trailing axes normalized
    features_last_only: bool = False  # flax: feature_axes=-1 with several reduction axes
    memory_efficient: bool = False

    def __str__(self):
        default = Config()
        return "-".join(f"{f.name}={getattr(self, f.name)}" for f in dataclasses.fields(self)
                        if getattr(self, f.name) != getattr(default, f.name)) or "default"


CONFIGS = [
    Config(),
    Config(x_dtype=BF16),
    Config(use_scale=False),
    Config(use_bias=False),
    Config(use_scale=False, use_bias=False, x_dtype=BF16),
    Config(param_dtype=BF16, x_dtype=BF16),
    Config(axes=2),
    Config(axes=2, features_last_only=True),
    Config(memory_efficient=True),
    Config(memory_efficient=True, x_dtype=BF16),
]


# ---- one adapter per framework: build a module, get its parameters, apply it purely ----


def _flax_kwargs(kind, cfg):
    """linen's and nnx's arguments (the same names and meanings)."""
    axes = tuple(range(-cfg.axes, 0))
    kw = dict(use_scale=cfg.use_scale, param_dtype=cfg.param_dtype, reduction_axes=axes,
              feature_axes=-1 if cfg.features_last_only else axes)
    if kind == "LayerNorm":
        kw["use_bias"] = cfg.use_bias
    return kw


class Linen:
    def __init__(self):
        self.nn = pytest.importorskip("flax.linen")
        import jaxnorm.flax

        self.ours = jaxnorm.flax

    def make(self, kind, cfg, x_shape, ours):
        kw = _flax_kwargs(kind, cfg)
        if ours:
            return getattr(self.ours, kind)(memory_efficient=cfg.memory_efficient, **kw)
        return getattr(self.nn, kind)(**kw)

    def params(self, module, x):
        return module.init(jax.random.key(0), x)

    def apply(self, module):
        return module.apply


class Nnx:
    def __init__(self):
        self.nnx = pytest.importorskip("flax.nnx")
        import jaxnorm.nnx

        self.ours = jaxnorm.nnx

    def make(self, kind, cfg, x_shape, ours):
        features = x_shape[-1:] if cfg.features_last_only else x_shape[-cfg.axes:]
        kw = dict(_flax_kwargs(kind, cfg), rngs=self.nnx.Rngs(0))
        if ours:
            return getattr(self.ours, kind)(math.prod(features), memory_efficient=cfg.memory_efficient, **kw)
        return getattr(self.nnx, kind)(math.prod(features), **kw)

    def params(self, module, x):
        return self.nnx.state(module)

    def apply(self, module):
        graphdef = self.nnx.graphdef(module)
        return lambda state, x: self.nnx.merge(graphdef, state)(x)


class Equinox:
    def __init__(self):
        self.eqx = pytest.importorskip("equinox")
        import jaxnorm.equinox

        self.ours = jaxnorm.equinox

    def make(self, kind, cfg, x_shape, ours):
        if cfg.features_last_only:
            pytest.skip("equinox's parameters always have the normalized shape")
        kw = dict(use_weight=cfg.use_scale, use_bias=cfg.use_bias, dtype=cfg.param_dtype)
        shape = x_shape[-cfg.axes:]
        if ours:
            return getattr(self.ours, kind)(shape, memory_efficient=cfg.memory_efficient, **kw)
        return getattr(self.eqx.nn, kind)(shape, **kw)

    def params(self, module, x):
        return jax.tree.leaves(module)

    def apply(self, module):
        """On a batch: an Equinox norm takes one example, so it is vmapped over the leading axes."""
        structure = jax.tree.structure(module)

        def f(leaves, x):
            m = jax.tree.unflatten(structure, leaves)
            lead = x.shape[: x.ndim - len(m.shape)]
            return jax.vmap(m)(x.reshape(-1, *m.shape)).reshape(*lead, *m.shape)

        return f


FRAMEWORKS = {"linen": Linen, "nnx": Nnx, "equinox": Equinox}


@pytest.fixture(params=list(FRAMEWORKS))
def framework(request):
    return FRAMEWORKS[request.param]()


def runner(framework, module):
    """jit((params, x, cotangent) -> (y, (parameter gradients, x gradient))): one compilation for
    every call with the same shapes."""
    f = framework.apply(module)

    def run(params, x, ct):
        y, pullback = jax.vjp(f, params, x)
        return y, pullback(ct)

    return jax.jit(run)


# ---- parameters made by one module drive the other ----


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("cfg", CONFIGS, ids=str)
def test_same_parameters_outputs_and_gradients(framework, kind, cfg, rng):
    """Each module's parameters have the other's names, shapes and dtypes; with either's
    (randomized), both give equal outputs and equal gradients in the parameters and the input."""
    x = make_input(rng, (8, 6, 32), cfg.x_dtype)
    theirs = framework.make(kind, cfg, x.shape, ours=False)
    ours = framework.make(kind, cfg, x.shape, ours=True)
    p_theirs, p_ours = framework.params(theirs, x), framework.params(ours, x)
    assert jax.tree.structure(p_theirs) == jax.tree.structure(p_ours)
    assert ([(a.shape, a.dtype) for a in jax.tree.leaves(p_theirs)]
            == [(a.shape, a.dtype) for a in jax.tree.leaves(p_ours)])
    run_ours, run_theirs = runner(framework, ours), runner(framework, theirs)
    for params in (p_theirs, p_ours):
        params = randomize(rng, params)
        out = jax.eval_shape(framework.apply(theirs), params, x)
        ct = jnp.asarray(rng.normal(size=out.shape), out.dtype)
        assert_same_results(run_ours(params, x, ct), run_theirs(params, x, ct), cfg.memory_efficient)


@pytest.mark.parametrize("kind", KINDS)
def test_eager(framework, kind, rng):
    """Outside jit too (every other comparison here runs jitted)."""
    x = make_input(rng, (4, 32), F32)
    theirs = framework.make(kind, Config(), x.shape, ours=False)
    ours = framework.make(kind, Config(), x.shape, ours=True)
    params = randomize(rng, framework.params(theirs, x))
    assert_close(framework.apply(ours)(params, x), framework.apply(theirs)(params, x))


@pytest.mark.parametrize("kind", KINDS)
def test_memory_efficient_changes_only_the_backward(framework, kind, rng):
    """The flag reaches the kernel: the same forward bits, a backward from y (other bits)."""
    x = make_input(rng, (8, 6, 32), F32)
    modules = [framework.make(kind, Config(memory_efficient=m), x.shape, ours=True) for m in (False, True)]
    params = randomize(rng, framework.params(modules[0], x))
    ct = jnp.asarray(rng.normal(size=x.shape), F32)
    (y0, (_, dx0)), (y1, (_, dx1)) = (runner(framework, m)(params, x, ct) for m in modules)
    np.testing.assert_array_equal(np.asarray(y0), np.asarray(y1))
    assert not np.array_equal(np.asarray(dx0), np.asarray(dx1))


@pytest.mark.parametrize("kind", KINDS)
def test_lowers_to_the_custom_calls(framework, kind, rng):
    x = make_input(rng, (4, 32), F32)
    module = framework.make(kind, Config(), x.shape, ours=True)
    params = framework.params(module, x)
    f = framework.apply(module)
    assert "custom_call @jaxnorm_norm_fwd" in jax.jit(f).lower(params, x).as_text()
    loss = lambda p, x: jnp.sum(f(p, x) * x)  # noqa: E731
    grad_hlo = jax.jit(jax.grad(loss, (0, 1))).lower(params, x).as_text()
    assert "custom_call @jaxnorm_norm_bwd" in grad_hlo


# ---- a model trained with flax's LayerNorm, loaded into jaxnorm's ----


@pytest.mark.parametrize("kind", KINDS)
def test_linen_model_checkpoint_loads_into_jaxnorm(kind, rng):
    """A 2-layer MLP with flax.linen norms, trained a few SGD steps, serialized (flax's msgpack
    checkpoint) and restored into the same model built with jaxnorm's norms: equal outputs."""
    nn = pytest.importorskip("flax.linen")
    from flax import serialization

    import jaxnorm.flax

    class MLP(nn.Module):
        norm: type

        @nn.compact
        def __call__(self, x):
            x = self.norm()(nn.Dense(64)(x))
            x = self.norm()(nn.Dense(64)(nn.gelu(x)))
            return nn.Dense(1)(nn.gelu(x))

    theirs, ours = MLP(getattr(nn, kind)), MLP(getattr(jaxnorm.flax, kind))
    x = jnp.asarray(rng.normal(size=(32, 16)), F32)
    target = jnp.sin(x.sum(-1, keepdims=True))
    loss = lambda p: jnp.mean((theirs.apply(p, x) - target) ** 2)  # noqa: E731
    step = jax.jit(lambda p: jax.tree.map(lambda a, g: a - 0.01 * g, p, jax.grad(loss)(p)))
    params = theirs.init(jax.random.key(0), x)
    first = loss(params)
    for _ in range(5):
        params = step(params)
    assert loss(params) < first
    assert not np.allclose(params["params"][f"{kind}_0"]["scale"], 1.0)  # the norms trained too

    restored = serialization.from_bytes(ours.init(jax.random.key(1), x), serialization.to_bytes(params))
    # Full-precision matmuls: on GPUs float32 dots default to TF32, whose input rounding would
    # magnify the norms' last-bit differences past the tolerance.
    with jax.default_matmul_precision("highest"):
        assert_close(jax.jit(ours.apply)(restored, x), jax.jit(theirs.apply)(params, x))


def test_equinox_serialised_leaves_load_both_ways(rng):
    eqx = pytest.importorskip("equinox")
    import jaxnorm.equinox

    for kind in KINDS:
        a = randomize(rng, getattr(eqx.nn, kind)((6, 32), dtype=F32))
        b = getattr(jaxnorm.equinox, kind)((6, 32), dtype=F32)
        for source, target in ((a, b), (b, a)):
            buffer = io.BytesIO()
            eqx.tree_serialise_leaves(buffer, source)
            buffer.seek(0)
            loaded = eqx.tree_deserialise_leaves(buffer, target)
            assert type(loaded) is type(target)
            for u, v in zip(jax.tree.leaves(loaded), jax.tree.leaves(source)):
                np.testing.assert_array_equal(np.asarray(u), np.asarray(v))


# ---- what the kernel cannot do raises, naming the argument ----


def _raises(exc, fragment):
    return pytest.raises(exc, match=re.escape(fragment))


def _linen_errors():
    pytest.importorskip("flax")
    import jaxnorm.flax as ours

    x = jnp.ones((2, 4, 8), F32)
    init = lambda m, **kw: m.init(jax.random.key(0), x, **kw)  # noqa: E731
    return [
        (lambda: init(ours.LayerNorm(reduction_axes=1)), NotImplementedError, "`reduction_axes` 1 must name trailing axes"),
        (lambda: init(ours.LayerNorm(feature_axes=(-2, -1))), NotImplementedError, "feature_axes (-2, -1) must be among"),
        (lambda: init(ours.RMSNorm(axis_name="i")), NotImplementedError, "`axis_name` ('i') is not supported"),
        (lambda: init(ours.LayerNorm(axis_index_groups=[[0]])), NotImplementedError, "`axis_index_groups`"),
        (lambda: init(ours.LayerNorm(force_float32_reductions=False)), NotImplementedError,
         "`force_float32_reductions=False`"),
        (lambda: init(ours.RMSNorm(), mask=x > 0), NotImplementedError, "`mask` is not supported"),
        (lambda: init(ours.LayerNorm(param_dtype=jnp.float64)), TypeError, "would be computed in float64"),
        (lambda: init(ours.LayerNorm(reduction_axes=-1, epsilon=-1.0)), ValueError, "`epsilon` must be >= 0"),
        (lambda: ours.EmbedWithPosition(10, 8).init(jax.random.key(0), x, position=0), TypeError,
         "`ids` must be an integer array"),
    ]


def _nnx_errors():
    nnx = pytest.importorskip("flax.nnx")
    import jaxnorm.nnx as ours

    x = jnp.ones((2, 4, 8), F32)
    rngs = nnx.Rngs(0)
    return [
        (lambda: ours.LayerNorm(8, reduction_axes=1, rngs=rngs)(x), NotImplementedError, "`reduction_axes` 1 must name trailing"),
        (lambda: ours.RMSNorm(32, feature_axes=(-2, -1), rngs=rngs)(x), NotImplementedError, "must be among"),
        (lambda: ours.LayerNorm(8, axis_name="i", rngs=rngs)(x), NotImplementedError, "`axis_name`"),
        (lambda: ours.LayerNorm(8, rngs=rngs)(x, mask=x > 0), NotImplementedError, "`mask`"),
        (lambda: ours.LayerNorm(7, rngs=rngs)(x), ValueError, "`scale` of shape (7,) does not fit feature_axes -1"),
        (lambda: ours.RMSNorm(8, param_dtype=jnp.float64, rngs=rngs)(x), TypeError, "computed in float64"),
    ]


def _equinox_errors():
    pytest.importorskip("equinox")
    import jaxnorm.equinox as ours

    return [
        (lambda: ours.LayerNorm(8)(jnp.ones((2, 8), F32)), ValueError, "x must have the module's shape (8,)"),
        (lambda: ours.RMSNorm(8)(jnp.ones(8, jnp.float64)), TypeError, "computed in float64"),
    ]


@pytest.mark.parametrize("errors", [_linen_errors, _nnx_errors, _equinox_errors],
                         ids=["linen", "nnx", "equinox"])
def test_unsupported_arguments_raise(errors):
    for call, exc, fragment in errors():
        with _raises(exc, fragment):
            call()


def test_missing_framework_names_the_extra():
    from jaxnorm._modules import require

    with _raises(ModuleNotFoundError, "pip install 'jaxnorm[flax]'"):
        require("jaxnorm_no_such_framework", "flax")


def test_importing_jaxnorm_imports_no_framework():
    code = "import sys, jaxnorm; print(sorted({'flax', 'equinox'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# ---- the embedding: flax's Embed parameter, the lookup fused with scale and position ----


class LinenEmbed:
    def __init__(self, **kw):
        nn = pytest.importorskip("flax.linen")
        import jaxnorm.flax

        self.theirs, self.ours = nn.Embed(VOCAB, WIDTH), jaxnorm.flax.EmbedWithPosition(VOCAB, WIDTH, **kw)

    def params(self, ids):
        return self.theirs.init(jax.random.key(0), ids)

    def lookup(self, params, ids):
        return self.theirs.apply(params, ids)

    def embed(self, params, ids, position):
        return self.ours.apply(params, ids, position=position)

    def attend(self, params, query):
        return self.ours.apply(params, query, method="attend"), self.theirs.apply(params, query, method="attend")


class NnxEmbed:
    def __init__(self, **kw):
        self.nnx = pytest.importorskip("flax.nnx")
        import jaxnorm.nnx

        theirs = self.nnx.Embed(VOCAB, WIDTH, rngs=self.nnx.Rngs(0))
        ours = jaxnorm.nnx.EmbedWithPosition(VOCAB, WIDTH, rngs=self.nnx.Rngs(1), **kw)
        (self.theirs, self._state), self.ours = self.nnx.split(theirs), self.nnx.graphdef(ours)

    def params(self, ids):
        return self._state

    def lookup(self, params, ids):
        return self.nnx.merge(self.theirs, params)(ids)

    def embed(self, params, ids, position):
        return self.nnx.merge(self.ours, params)(ids, position=position)

    def attend(self, params, query):
        return self.nnx.merge(self.ours, params).attend(query), self.nnx.merge(self.theirs, params).attend(query)


VOCAB, WIDTH = 50, 16


@pytest.mark.parametrize("embed", [LinenEmbed, NnxEmbed], ids=["linen", "nnx"])
@pytest.mark.parametrize("scale", [None, 1.0])
def test_embed_with_position_is_embed_scaled_plus_position(embed, scale, rng):
    """Embed's parameter, and Embed(ids) * scale + PE(position) with its gradient."""
    e = embed(scale=scale)
    ids = jnp.asarray(rng.integers(0, VOCAB, (3, 7)), jnp.int32)
    position = jnp.arange(7, dtype=jnp.int32) + 5
    params = randomize(rng, e.params(ids))
    s = math.sqrt(WIDTH) if scale is None else scale
    pe = jaxnorm.reference.sine_position_encoding(position, WIDTH)
    ct = jnp.asarray(rng.normal(size=(3, 7, WIDTH)), F32)
    expected = jax.vjp(lambda p: e.lookup(p, ids) * np.float32(s) + pe, params)
    actual = jax.vjp(lambda p: e.embed(p, ids, position), params)
    # float32 both; jaxnorm rounds table * scale + PE once, the composition twice: 2^-17 M suffices.
    assert_close(actual[0], expected[0])
    for g, g_e in zip(jax.tree.leaves(actual[1](ct)), jax.tree.leaves(expected[1](ct))):
        assert_close(g, g_e)
    assert_close(e.embed(params, ids, 9), e.lookup(params, ids) * np.float32(s)
                 + jaxnorm.reference.sine_position_encoding(9, WIDTH))
    query = jnp.asarray(rng.normal(size=(2, WIDTH)), F32)
    np.testing.assert_array_equal(*e.attend(params, query))


def test_embed_with_position_dtype_and_custom_call(rng):
    nn = pytest.importorskip("flax.linen")
    import jaxnorm.flax

    ids = jnp.asarray(rng.integers(0, VOCAB, (2, 5)), jnp.int32)
    module = jaxnorm.flax.EmbedWithPosition(VOCAB, WIDTH, dtype=jnp.bfloat16)
    params = randomize(rng, nn.Embed(VOCAB, WIDTH).init(jax.random.key(0), ids))
    y = module.apply(params, ids, position=3)
    assert y.dtype == BF16 and params["params"]["embedding"].dtype == F32
    f32 = jaxnorm.flax.EmbedWithPosition(VOCAB, WIDTH).apply(params, ids, position=3)
    np.testing.assert_array_equal(np.asarray(y), np.asarray(f32.astype(BF16)))
    hlo = jax.jit(lambda p: module.apply(p, ids, position=3)).lower(params).as_text()
    assert "custom_call @jaxnorm_embed_fwd" in hlo


def test_equinox_embed_with_position(rng):
    """eqx.nn.Embedding's leaf and lookup, scaled plus the encoding; vmapped over tokens the
    gradient is one [vocab, d] segment sum."""
    eqx = pytest.importorskip("equinox")
    import jaxnorm.equinox

    theirs = randomize(rng, eqx.nn.Embedding(VOCAB, WIDTH, dtype=F32, key=jax.random.key(0)))
    ours = jaxnorm.equinox.EmbedWithPosition(VOCAB, WIDTH, weight=theirs.weight)
    ids = jnp.asarray(rng.integers(0, VOCAB, (3, 7)), jnp.int32)
    position = jnp.broadcast_to(jnp.arange(7, dtype=jnp.int32), (3, 7))
    pe = jaxnorm.reference.sine_position_encoding(position, WIDTH)
    run = lambda m: jax.vmap(jax.vmap(lambda i, p: m(i, position=p)))(ids, position)
    expected = jax.vmap(jax.vmap(theirs))(ids) * np.float32(math.sqrt(WIDTH)) + pe
    assert_close(run(ours), expected)
    ct = jnp.asarray(rng.normal(size=(3, 7, WIDTH)), F32)
    grad = lambda f: jax.grad(lambda w: jnp.sum(f(w) * ct))(theirs.weight)
    assert_close(grad(lambda w: run(eqx.tree_at(lambda m: m.weight, ours, w))),
                 grad(lambda w: jax.vmap(jax.vmap(eqx.tree_at(lambda m: m.weight, theirs, w)))(ids)
                      * np.float32(math.sqrt(WIDTH))))
    hlo = jax.jit(lambda w: grad(lambda w2: run(eqx.tree_at(lambda m: m.weight, ours, w2)))).lower(theirs.weight)
    calls = [line for line in hlo.as_text().splitlines() if "custom_call @jaxnorm_embed_bwd" in line]
    assert len(calls) == 1 and f"tensor<{VOCAB}x{WIDTH}xf32>" in calls[0].split("->")[-1], calls
    with pytest.raises(ValueError, match="one index"):
        ours(ids, position=0)
