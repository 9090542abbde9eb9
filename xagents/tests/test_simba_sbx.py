"""``simba=True`` trains as SBX's SimBa policies: AdamW with weight decay 1e-4 for every SimBa network (the entropy
coefficient and agents without SimBa keep Adam), decaying inside the real compiled update on every backend, saves
written with Adam loading into AdamW with their moments, and the running observation normalisation unclipped (SimBa's
RSNorm), while every other agent keeps its clip."""
import keras
import numpy as np
import pytest
from keras import ops

from xagents.envs.creation import create_envs
from xagents.networks.residual import SIMBA_WEIGHT_DECAY
from xagents.registry import agent_class
from xagents.sac import SAC
from xagents.tests.test_off_policy import filled, weights

pytestmark = pytest.mark.backends  # the optimizers' state and update inside each backend's compiled step

AGENTS = [('sac', 'Pendulum-v1'), ('tqc', 'Pendulum-v1'), ('crossq', 'Pendulum-v1'), ('td3', 'Pendulum-v1'),
          ('dqn', 'CartPole-v1'), ('ppo', 'CartPole-v1'), ('trpo', 'Pendulum-v1')]


def kind(optimizer: keras.optimizers.Optimizer) -> str:
    """AdamW, Adam or another optimizer's class name (each backend builds its own subclass of Keras' classes)."""
    for known in (keras.optimizers.AdamW, keras.optimizers.Adam):  # AdamW first: it is an Adam
        if isinstance(optimizer, known):
            return known.__name__
    return type(optimizer).__name__


@pytest.mark.parametrize('agent, env_id', AGENTS, ids=[agent for agent, _ in AGENTS])
def test_simba_networks_train_with_adamw_and_sbx_weight_decay_and_others_with_adam(agent, env_id):
    built = agent_class(agent)(create_envs(env_id), simba=True, quiet=True)
    for role, optimizer in built.optimizers.items():
        if role == 'alpha':  # SBX's entropy coefficient keeps optax.adam
            assert kind(optimizer) == 'Adam' and optimizer.weight_decay is None
        else:
            assert kind(optimizer) == 'AdamW', role
            assert optimizer.weight_decay == SIMBA_WEIGHT_DECAY == 1e-4
    plain = agent_class(agent)(create_envs(env_id), quiet=True)
    assert set(plain.optimizers) == set(built.optimizers)
    for optimizer in plain.optimizers.values():
        assert kind(optimizer) == 'Adam' and optimizer.weight_decay is None


def test_simba_adamw_keeps_the_agents_adam_settings():
    """CrossQ's beta_1 = 0.5 (SBX's SimbaCrossQPolicy passes b1=0.5 to optax.adamw too) and the learning rate stay."""
    agent = agent_class('crossq')(create_envs('Pendulum-v1'), simba=True, lr=2e-3, quiet=True)
    for role in ('actor', 'critic'):
        optimizer = agent.optimizers[role]
        assert optimizer.beta_1 == 0.5 and np.isclose(float(optimizer.learning_rate), 2e-3)


def test_a2c_simba_keeps_rmsprop_and_takes_adamw_for_adam():
    envs = create_envs('CartPole-v1')
    assert kind(agent_class('a2c')(envs, simba=True, quiet=True).optimizer) == 'RMSpropTF1'
    assert kind(agent_class('a2c')(envs, simba=True, optimizer='adam', quiet=True).optimizer) == 'AdamW'


def test_simba_critics_decay_by_learning_rate_times_1e_4_in_the_compiled_update():
    """Two SimBa SACs on the same seed, buffer and batch, one with its decay turned off: after one real update the
    critics (updated first, from the same gradients) differ by exactly lr x 1e-4 x their weights before it."""
    lr = 0.5  # large, so that the decay (lr x 1e-4 of a weight) stands far above float32 round-off
    decayed, undecayed = (filled(SAC, simba=True, lr=lr) for _ in range(2))
    for optimizer in undecayed.optimizers.values():
        optimizer.weight_decay = None
    before = weights(decayed.critic)
    for start, twin in zip(before, weights(undecayed.critic)):
        np.testing.assert_array_equal(start, twin)
    decayed.update()
    undecayed.update()
    assert decayed.gradient_updates.numpy() == undecayed.gradient_updates.numpy() == 1
    moved = 0
    for start, new, twin in zip(before, weights(decayed.critic), weights(undecayed.critic)):
        np.testing.assert_allclose(twin - new, lr * 1e-4 * start, rtol=0.02, atol=2e-7)
        moved += np.abs(twin - new).max() > 1e-6
    assert moved >= len(before) // 2  # (layer norms' zero shifts and ones gain nothing to measure)


def test_a_simba_save_written_with_adam_loads_into_adamw_with_its_moments(tmp_path):
    """Saves of SimBa agents from before AdamW hold Adam's state: AdamW keeps the same variables, so they load
    whole and training goes on."""
    agent = filled(SAC, simba=True)
    for role in ('actor', 'critic'):  # as SimBa agents were built before: Adam
        adam = keras.optimizers.Adam(**agent.optimizer_settings)
        setattr(agent, f'{role}_optimizer', agent.make_optimizer(role, adam))
    agent.update()
    saved = {role: [ops.convert_to_numpy(v) for v in agent.optimizers[role].variables] for role in ('actor', 'critic')}
    assert all(np.any(values != 0) for values in saved['critic'][2:])  # moments written
    path = agent.save(str(tmp_path / 'adam'), include_buffer=True)
    loaded = SAC.load(path, quiet=True)
    for role, values in saved.items():
        assert kind(loaded.optimizers[role]) == 'AdamW'
        for value, variable in zip(values, loaded.optimizers[role].variables, strict=True):
            np.testing.assert_array_equal(value, ops.convert_to_numpy(variable))
    loaded.update()
    assert loaded.gradient_updates.numpy() == 2


@pytest.mark.parametrize('agent, env_id, clip', [('sac', 'Pendulum-v1', 5.0), ('ppo', 'Pendulum-v1', 10.0)],
                         ids=['off-policy', 'on-policy'])
@pytest.mark.parametrize('simba', [True, False], ids=['simba', 'plain'])
def test_simba_normalised_observations_are_not_clipped(agent, env_id, clip, simba):
    """An observation 50 standard deviations from the running mean comes through as 50 under SimBa (SimBa's RSNorm,
    unclipped), and clipped (Baselines' DDPG's 5 off-policy, VecNormalize's 10 on-policy) without it."""
    built = agent_class(agent)(create_envs(env_id), simba=simba, normalize_observations=True, quiet=True)
    rng = np.random.default_rng(0)
    built.observe(rng.normal([0.5, -0.5, 2.0], [0.3, 0.3, 1.5], size=(1000, 3)).astype(np.float32))
    stats = built.observation_stats
    far = (stats.mean + np.array([50, -50, 3]) * np.sqrt(stats.var + 1e-8))[None].astype(np.float32)
    expected = [50, -50, 3] if simba else [clip, -clip, 3]
    np.testing.assert_allclose(built.normalized(far)[0], expected, rtol=1e-4)
    np.testing.assert_allclose(ops.convert_to_numpy(built.normalized_graph(far))[0], expected, rtol=1e-4)
