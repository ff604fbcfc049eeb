"""Real-GPU check: a jitted JAX training loop. Prints losses; run.sh compares with and without
libvgpu.so."""
import jax
import jax.numpy as jnp

print("backend", jax.default_backend())
key = jax.random.PRNGKey(0)
k1, k2, k3 = jax.random.split(key, 3)
x = jax.random.normal(k1, (2048, 128))
true_w = jax.random.normal(k2, (128, 1))
y = x @ true_w + 0.01 * jax.random.normal(k3, (2048, 1))


def loss_fn(w):
    return jnp.mean((x @ w - y) ** 2)


@jax.jit
def step(w):
    loss, grad = jax.value_and_grad(loss_fn)(w)
    return w - 0.05 * grad, loss


w = jnp.zeros((128, 1))
for i in range(100):
    w, loss = step(w)
    if i % 20 == 19:
        print(f"jax step {i + 1} loss {float(loss):.6f}")
print("jax done")
