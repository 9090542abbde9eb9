"""The agent's graph random stream (``graph_random``, Keras' seed generator) through compiled updates on every
backend: one update advances it by exactly the draws it makes, those inside a differentiated loss (SAC's, TQC's and
CrossQ's reparameterised actions) too, and no two draws of an update or of the next reuse a seed (so no two are the
same noise). On JAX the stream's state is threaded through the compiled call, its loops and its gradients as a value:
a draw inside a loss whose new state were dropped would leave the next draw repeating it."""
import keras
import numpy as np
import pytest
from keras import ops

from xagents.crossq import CrossQ
from xagents.sac import SAC
from xagents.tqc import TQC

pytestmark = pytest.mark.backends

GRADIENT_STEPS = 6
# Draws per update of GRADIENT_STEPS gradient steps: SAC and TQC sample a' ~ pi(.|s') for the target and a~ ~ pi(.|s)
# inside the actor's loss at every step; CrossQ samples a' at every step and a~ on the actor's steps (every third);
# with gSDE one noise matrix per step serves both, and the actions are drawn from it.
CASES = [(SAC, {'actor_model': 'ann-actor.cfg', 'critic_model': 'ann-critic.cfg'}, 2 * GRADIENT_STEPS),
         (SAC, {'actor_model': 'ann-actor.cfg', 'critic_model': 'ann-critic.cfg', 'use_sde': True}, GRADIENT_STEPS),
         (TQC, {'n_quantiles': 5, 'use_sde': False}, 2 * GRADIENT_STEPS),  # (Pendulum's preset has gSDE)
         (CrossQ, {'actor_model': 'ann-actor-64.cfg', 'critic_model': 'ann-critic-64.cfg', 'policy_delay': 3},
          GRADIENT_STEPS + 2)]
IDS = ['sac', 'sac-gsde', 'tqc', 'crossq']


def counter(agent) -> int:
    """The seed generator's count of draws (its state is (seed, count))."""
    return int(ops.convert_to_numpy(agent.graph_random.state)[1])


def recording(agent) -> list[np.ndarray]:
    """The seeds the agent's graph random stream gives, each as it is drawn (inside the compiled update: through
    ``jax.debug.callback`` on JAX; PyTorch runs its updates eagerly). TensorFlow's compiled graphs cannot call back:
    None there."""
    backend = keras.backend.backend()
    if backend not in ('jax', 'torch'):
        return None
    seen, generator = [], agent.graph_random
    draw = generator.next

    def next_seed(ordered: bool = True):
        seed = draw(ordered)
        if backend == 'jax':
            import jax
            jax.debug.callback(lambda value: seen.append(np.asarray(value).copy()), seed)
        else:
            seen.append(ops.convert_to_numpy(seed).copy())
        return seed

    generator.next = next_seed
    return seen


@pytest.mark.parametrize('agent_class, settings, draws', CASES, ids=IDS)
def test_an_update_advances_the_graph_random_stream_by_its_draws_and_reuses_no_seed(agent_class, settings, draws):
    agent = agent_class.from_env('Pendulum-v1', seed=0, buffer_initial_size=256, buffer_batch_size=16,
                                 update_every=50, gradient_steps=GRADIENT_STEPS, update_after=10**9, quiet=True,
                                 **settings)
    agent.fit(max_steps=300)  # random play into the buffer, no update
    seen = recording(agent)
    start = counter(agent)
    agent.update()
    assert counter(agent) - start == draws
    agent.update()
    assert counter(agent) - start == 2 * draws
    if seen is not None:  # every draw took the next count: none repeats one before it
        assert len(seen) == 2 * draws
        assert sorted(int(seed[1]) for seed in seen) == list(range(start, start + 2 * draws))
        assert len({tuple(seed) for seed in seen}) == 2 * draws
