"""Reference trajectories of optax's ``lion`` and ``lamb`` (torch.optim has neither).

``python -m tests.optim.optax_reference`` (with optax installed) rewrites
``tests/optim/data/optax_reference.npz``, which ``test_optax_parity.py`` checks ember
against everywhere; where optax is installed the test also recomputes the trajectories
live. Parameters and gradients are float32; optax runs on JAX's CPU backend.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

DATA = Path(__file__).parent / "data" / "optax_reference.npz"
SHAPES = [(4, 3), (5,)]
STEPS = 12
LR = 1e-2
#: name -> (optax factory name, keyword arguments shared by optax and ember's config)
CASES = {
    "lion": ("lion", {"b1": 0.9, "b2": 0.99, "weight_decay": 0.1}),
    "lamb": ("lamb", {"b1": 0.9, "b2": 0.999, "eps": 1e-6, "weight_decay": 0.01}),
}


def problem() -> tuple[list[np.ndarray], list[list[np.ndarray]]]:
    """Initial parameters (one of them zero, LAMB's degenerate trust ratio) and a
    gradient per step and parameter."""
    rng = np.random.default_rng(2026)
    params = [rng.standard_normal(SHAPES[0]).astype(np.float32), np.zeros(SHAPES[1], np.float32)]
    grads = [[rng.standard_normal(s).astype(np.float32) for s in SHAPES] for _ in range(STEPS)]
    return params, grads


def optax_trajectory(name: str) -> list[np.ndarray]:
    """The parameters after each step, flattened and concatenated, as rows."""
    import jax.numpy as jnp
    import optax

    factory, options = CASES[name]
    params, grads = problem()
    tx = getattr(optax, factory)(LR, **options)
    state_params = [jnp.asarray(p) for p in params]
    state = tx.init(state_params)
    rows = []
    for step_grads in grads:
        updates, state = tx.update([jnp.asarray(g) for g in step_grads], state, state_params)
        state_params = optax.apply_updates(state_params, updates)
        rows.append(np.concatenate([np.asarray(p, np.float32).ravel() for p in state_params]))
    return rows


def main() -> None:
    DATA.parent.mkdir(exist_ok=True)
    np.savez(DATA, **{name: np.stack(optax_trajectory(name)) for name in CASES})
    print(f"wrote {DATA}")


if __name__ == "__main__":
    main()
