import sys, jax, jax.numpy as jnp, jaxnorm
rows, cols = int(sys.argv[1]), int(sys.argv[2]); dt = getattr(jnp, sys.argv[3])
x = jax.random.normal(jax.random.key(0), (rows, cols), jnp.float32).astype(dt) * 3
y = jax.random.randint(jax.random.key(1), (rows,), 0, cols)
f = jax.jit(jax.value_and_grad(lambda x: jaxnorm.softmax_cross_entropy(x, y, reduction="mean")))
for _ in range(3): jax.block_until_ready(f(x))
