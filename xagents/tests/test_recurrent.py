"""Recurrent policies (PPO and A2C with recurrent='lstm' or 'gru'): the layer's maths and its reset at episode
starts, collection and training on the same sequences, memory through predict, evaluation, play, save and
exports, the command line, and learning what a policy without memory cannot."""
import os

import gymnasium as gym
import keras
import numpy as np
import pytest

import xagents.envs.toy_envs  # noqa: F401 (registers Recall-v0)
from xagents import A2C, PPO
from xagents.envs.creation import create_envs
from xagents.storage.export import FORMATS, load_exported
from xagents.networks.models import CfgError, NumpyForward, Output, build_model
from xagents.networks.recurrence import Memory, in_sequences
from xagents.maths.returns import gae

pytestmark = pytest.mark.backends  # memory on each backend: the layer, collection, training, saves, exports
numpy = keras.ops.convert_to_numpy  # a model's outputs as arrays, on any backend

MODELS = os.path.join(os.path.dirname(xagents.envs.toy_envs.__file__), '..', 'agent', 'models')
VECTOR = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)


def recurrent_model(kind: str, cfg: str = 'ann-model-recurrent.cfg') -> keras.Model:
    keras.utils.set_random_seed(0)
    return build_model(os.path.join(MODELS, cfg), VECTOR, [Output('policy', 2), Output('value', 1)], recurrent=kind)


def step_by_step(model, observations, starts, state):
    """The model acting one step at a time (as in collection) over ``(B, T, ...)`` sequences."""
    outputs = []
    for t in range(observations.shape[1]):
        *step, state = model([observations[:, t], starts[:, t:t + 1], state])
        outputs.append(numpy(step[0]))
        state = numpy(state)
    return np.stack(outputs, 1), state


@pytest.mark.parametrize('kind', ['lstm', 'gru'])
def test_a_sequence_equals_its_steps_and_the_state_resets_exactly_where_an_episode_starts_per_env(kind):
    model = recurrent_model(kind)
    size = model.layer_graph.state_size
    assert size == (2 * 64 if kind == 'lstm' else 64) * 2  # one layer per head (separate actor and critic)
    rng = np.random.default_rng(0)
    observations = rng.normal(size=(3, 6, 4)).astype(np.float32)
    starts = np.zeros((3, 6), np.float32)
    starts[1, 3] = 1.0  # env 1 begins an episode at its 4th step; envs 0 and 2 do not
    state = rng.normal(size=(3, size)).astype(np.float32)
    *whole, last = model([observations.reshape(18, 4), starts, state])
    steps, stepped_last = step_by_step(model, observations, starts, state)
    np.testing.assert_allclose(numpy(whole[0]).reshape(3, 6, -1), steps, atol=1e-5)
    np.testing.assert_allclose(numpy(last), stepped_last, atol=1e-5)
    # From its start on, env 1 acts as if it had begun there with a zero state, whatever came before...
    fresh, _ = step_by_step(model, observations[1:2, 3:], np.array([[1, 0, 0]], np.float32),
                            np.zeros((1, size), np.float32))
    np.testing.assert_allclose(steps[1, 3:], fresh[0], atol=1e-5)
    # ...and before it (and in the other envs) the state it carried counts.
    carried, _ = step_by_step(model, observations, np.zeros((3, 6), np.float32), np.zeros((3, size), np.float32))
    # (Well above float32 noise, ~1e-7, whichever backend's initialiser drew the weights.)
    assert np.abs(carried[0] - steps[0]).max() > 2e-5 and np.abs(carried[1, :3] - steps[1, :3]).max() > 2e-5
    assert np.abs(carried[1, 3:] - fresh[0]).max() > 2e-5  # (without the reset, env 1 would have acted otherwise)


@pytest.mark.parametrize('kind', ['lstm', 'gru'])
def test_numpy_acting_equals_the_keras_model(kind):
    model = recurrent_model(kind, 'ann-model-recurrent-relu.cfg')
    assert NumpyForward.supports(model)
    rng = np.random.default_rng(1)
    observations = rng.normal(size=(5, 4)).astype(np.float32)
    starts = np.array([[1], [0], [0], [1], [0]], np.float32)
    state = rng.normal(size=(5, model.layer_graph.state_size)).astype(np.float32)
    expected = [numpy(output) for output in model([observations, starts, state])]
    for got, want in zip(NumpyForward(model)(observations, starts, state), expected):
        np.testing.assert_allclose(got, want, atol=1e-5)


def test_a_cfg_and_the_recurrent_setting_must_agree(tmp_path):
    with pytest.raises(CfgError, match=r"\[recurrent-1\]: a recurrent layer needs recurrent='lstm' or 'gru'"):
        build_model(os.path.join(MODELS, 'ann-model-recurrent.cfg'), VECTOR, [Output('policy', 2), Output('value', 1)])
    with pytest.raises(CfgError, match=r"recurrent='gru' needs a \[recurrent-N\] section"):
        build_model(os.path.join(MODELS, 'ann-model.cfg'), VECTOR, [Output('policy', 2), Output('value', 1)],
                    recurrent='gru')
    with pytest.raises(ValueError, match="expected recurrent 'lstm' or 'gru'"):
        PPO(create_envs('CartPoleNoVel-v1', n_envs=2), recurrent='rnn')
    with pytest.raises(ValueError, match='expected sequence_length to divide n_steps = 32, got 5'):
        PPO(create_envs('CartPoleNoVel-v1', n_envs=2), n_steps=32, recurrent='lstm', sequence_length=5)
    with pytest.raises(ValueError, match='mini_batches to divide the n_envs \\* n_steps / sequence_length = 4'):
        PPO(create_envs('CartPoleNoVel-v1', n_envs=2), n_steps=32, recurrent='lstm', sequence_length=16, mini_batches=3)
    with pytest.raises(ValueError, match='sequence_length is for recurrent policies'):
        A2C(create_envs('CartPoleNoVel-v1', n_envs=2), sequence_length=5)


def collected(agent_class, **settings):
    agent = agent_class.from_env('CartPoleNoVel-v1', n_envs=3, seed=2, quiet=True, **settings)
    agent.start_envs()
    agent.collect()  # a first rollout: states have moved on from zeros
    return agent, agent.collect()


@pytest.mark.parametrize('agent_class, settings', [
    (PPO, {'recurrent': 'lstm', 'n_steps': 32, 'sequence_length': 8, 'mini_batches': 4}),
    (PPO, {'recurrent': 'gru', 'n_steps': 32, 'normalize_observations': True, 'mini_batches': 1}),
    (A2C, {'recurrent': 'lstm', 'n_steps': 16, 'use_sde': False}),
])
def test_training_sequences_reproduce_the_collection_time_log_probabilities(agent_class, settings):
    """Episodes of CartPole under a fresh policy last ~20 steps, so sequences hold episode starts inside them."""
    agent, rollout = collected(agent_class, **settings)
    assert rollout.dones.any() and rollout.episode_starts[1:].any()
    # A step begins an episode exactly where the previous one ended, per env.
    np.testing.assert_array_equal(rollout.episode_starts[1:], rollout.dones[:-1])
    length = agent.sequence_length
    *columns, starts = in_sequences(length, rollout.observations, rollout.actions, rollout.log_probs,
                                    rollout.episode_starts)
    states = in_sequences(1, rollout.states[::length])[0][:, 0]
    batch = agent.minibatch_of(keras.tree.map_structure(keras.ops.convert_to_tensor, {
        'observations': columns[0], 'actions': columns[1], 'sequences': (starts, states)}))
    params, values = agent.policy_value(batch['observations'], batch['sequences'])
    log_probs, _ = agent.log_prob_entropy(params, batch['actions'])
    np.testing.assert_allclose(numpy(log_probs), columns[2].reshape(-1), atol=2e-5)
    np.testing.assert_allclose(numpy(values)[:, 0], in_sequences(length, rollout.values)[0].reshape(-1), atol=2e-5)


def replayed(env_id: str, seed: int, actions: np.ndarray, **make_kwargs) -> dict:
    """Each env of a vector env seeded with ``seed`` replayed alone from its ``(T, E)`` actions: what it acted on
    (``observations (T, E, ...)``), ended (``terminated``, ``truncated``), its final observations (where an episode
    ended) and the observation after the last step."""
    steps, n_envs = actions.shape[:2]
    observations = np.zeros((steps + 1, n_envs, *gym.make(env_id).observation_space.shape), np.float32)
    finals = np.zeros_like(observations[:-1])
    terminated, truncated = np.zeros((steps, n_envs), bool), np.zeros((steps, n_envs), bool)
    for env_index in range(n_envs):
        env = gym.make(env_id, **make_kwargs)
        observations[0, env_index], _ = env.reset(seed=seed + env_index)
        for t in range(steps):
            observation, _, terminated[t, env_index], truncated[t, env_index], _ = env.step(actions[t, env_index])
            finals[t, env_index] = observation
            if terminated[t, env_index] or truncated[t, env_index]:
                observation, _ = env.reset()
            observations[t + 1, env_index] = observation
    return {'observations': observations[:-1], 'last': observations[-1], 'finals': finals,
            'terminated': terminated, 'truncated': truncated}


def stepped(model, observations: np.ndarray, starts: np.ndarray) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The model run one vector step at a time over every env's whole trajectory ``(T, E, ...)`` from a zero state,
    the state zeroed by hand where ``starts`` ``(T, E)`` says an episode begins (the layer itself never resets
    here); returns each step's outputs and the state after it."""
    state = np.zeros((observations.shape[1], int(model.outputs[-1].shape[-1])), np.float32)
    outputs, after = [], []
    for t in range(len(observations)):
        state = np.where(starts[t][:, None], 0.0, state).astype(np.float32)
        *step, state = model([observations[t], np.zeros((len(state), 1), np.float32), state])
        state = numpy(state)
        outputs.append([numpy(output) for output in step])
        after.append(state)
    return outputs, after


@pytest.mark.parametrize('agent_class, kind, settings', [
    (PPO, 'lstm', {'ppo_epochs': 1, 'mini_batches': 1, 'normalize_advantages': False}),
    (A2C, 'gru', {}),
])
def test_the_update_sees_each_envs_trajectory_as_its_steps_and_a_truncation_bootstraps_from_the_carried_state(
        agent_class, kind, settings):
    """Through the agent's own collection and ``train_once``, with CartPole's time limit cut to 20 steps so that
    episodes end (terminated or truncated) and begin inside sequences: the model run step by step over each env's
    whole trajectory (replayed alone, resets by hand) gives the stored values and log-probabilities, a truncated
    step's reward is ``1 + gamma * V(final observation)`` under the state carried to it, and the update's first
    losses are those of these step-by-step values and log-probabilities."""
    env_id, seed, limit = 'CartPoleNoVel-v1', 2, {'max_episode_steps': 20}
    agent = agent_class(create_envs(env_id, n_envs=3, seed=seed, env_kwargs=limit), recurrent=kind, n_steps=32,
                        sequence_length=8, seed=seed, **settings)
    model = agent.model
    for layer in model.layers:  # heads large enough that a wrong state changes every output visibly
        if layer.weights and layer.weights[0].shape[-1] in (1, 2):
            layer.set_weights([weight * (10.0 if layer.weights[0].shape[-1] == 1 else 100.0)
                               for weight in layer.get_weights()])
    agent.on_weights_changed()
    agent.start_envs()
    first = agent.collect()
    first = {name: np.array(getattr(first, name)) for name in ('observations', 'actions')}
    weights = model.get_weights()  # (what both rollouts were collected with)
    metrics = {name: float(value) for name, value in agent.train_once().items()}  # collects the second rollout
    model.set_weights(weights)
    second = agent.rollout
    actions = np.concatenate([first['actions'], second.actions])
    env = replayed(env_id, seed, actions, **limit)
    np.testing.assert_allclose(env['observations'], np.concatenate([first['observations'], second.observations]))
    dones = env['terminated'] | env['truncated']
    starts = np.concatenate([np.ones((1, 3), bool), dones[:-1]])
    late = slice(32, None)  # the second rollout's steps
    assert env['terminated'][late].any() and env['truncated'][late].any()
    assert (starts[late][np.arange(32) % 8 > 0]).any()  # an episode begins inside a sequence
    outputs, after = stepped(model, env['observations'], starts)
    logits = np.stack([output[0] for output in outputs])[late]
    values = np.stack([output[1][:, 0] for output in outputs])[late]
    log_softmax = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    log_probs = np.take_along_axis(log_softmax, second.actions[..., None].astype(int), -1)[..., 0]
    np.testing.assert_allclose(second.values, values, atol=1e-5)
    np.testing.assert_allclose(second.log_probs, log_probs, atol=1e-5)
    np.testing.assert_array_equal(second.dones, dones[late])
    # A truncated step adds gamma * V(final observation), its value under the state carried to it (not a fresh one).
    truncated = env['truncated'][late] & ~env['terminated'][late]
    expected_rewards = np.ones((32, 3), np.float32)
    for t, env_index in np.argwhere(truncated):
        state = after[32 + t][env_index:env_index + 1]
        final = model([env['finals'][32 + t, env_index:env_index + 1], np.zeros((1, 1), np.float32), state])[1]
        expected_rewards[t, env_index] += agent.gamma * float(numpy(final)[0, 0])
        fresh = model([env['finals'][32 + t, env_index:env_index + 1], np.ones((1, 1), np.float32), state])[1]
        assert abs(float(numpy(fresh)[0, 0]) - float(numpy(final)[0, 0])) > 1e-3  # (the state makes a difference)
    np.testing.assert_allclose(second.rewards, expected_rewards, atol=1e-5)
    # The update's first losses, from its sequences and their stored first states, are those of the steps.
    last_state = np.where(dones[-1][:, None], 0.0, after[-1]).astype(np.float32)
    last_values = numpy(model([env['last'], np.zeros((3, 1), np.float32), last_state])[1])[:, 0]
    advantages, returns = gae(expected_rewards, values, dones[late].astype(np.float32), last_values, agent.gamma,
                              agent.lam)
    probabilities = np.exp(log_softmax)
    expected = {'value_loss': np.mean((returns - values) ** 2),
                'entropy': np.mean(-(probabilities * log_softmax).sum(-1)),
                'policy_loss': -np.mean(advantages * (1.0 if agent_class is PPO else log_probs))}
    for name, value in expected.items():
        np.testing.assert_allclose(metrics[name], value, rtol=1e-5, atol=1e-6, err_msg=name)


def test_collection_carries_each_envs_state_and_zeroes_it_where_its_episode_starts():
    agent, rollout = collected(PPO, recurrent='lstm', n_steps=32, mini_batches=1)
    starts, states = rollout.episode_starts, rollout.states
    assert rollout.episode_starts[1:].any() and (~rollout.episode_starts[1:].astype(bool)).any()
    inputs = (rollout.observations, starts[..., None], states)
    # Acting from the stored state of step t gives the stored state of step t + 1 (none is lost or mixed up).
    for t in range(31):
        *_, next_state = agent.policy_and_value(*(part[t] for part in inputs))
        np.testing.assert_allclose(next_state, states[t + 1], atol=1e-5)
    # Where a step starts an episode, the state it carried in makes no difference.
    t, env = np.argwhere(starts[1:])[0] + (1, 0)
    with_state = agent.policy_and_value(rollout.observations[t, env:env + 1], np.ones((1, 1), np.float32),
                                        states[t, env:env + 1])
    zeroed = agent.policy_and_value(rollout.observations[t, env:env + 1], np.ones((1, 1), np.float32),
                                    np.zeros((1, states.shape[-1]), np.float32))
    assert np.abs(states[t, env]).max() > 0
    for a, b in zip(with_state, zeroed):
        np.testing.assert_allclose(a, b, atol=1e-6)


def test_predict_takes_and_returns_the_state_and_matches_the_policy_stepped_through_an_episode(tmp_path):
    agent = PPO.from_env('CartPoleNoVel-v1', n_envs=2, n_steps=16, recurrent='lstm', seed=0, quiet=True,
                         normalize_observations=True)
    agent.fit(max_steps=64)
    env = gym.make('CartPoleNoVel-v1')
    observation, _ = env.reset(seed=3)
    memory, state, start = agent.new_memory(1), None, True
    for _ in range(20):
        action, state = agent.predict(observation, state=state, episode_start=start)
        expected = agent.act(observation[None], True, memory=memory)[0]
        assert action == expected and state.shape == (agent.state_size,)
        np.testing.assert_allclose(state, memory.next_state[0], atol=1e-6)
        observation, _, terminated, truncated, _ = env.step(action)
        start = terminated or truncated
        memory.advance([start])
        if start:
            observation, _ = env.reset()
    batch_actions, batch_state = agent.predict(np.zeros((3, 4), np.float32))
    assert batch_actions.shape == (3,) and batch_state.shape == (3, agent.state_size)
    with pytest.raises(ValueError, match=r'expected a state shaped \(3, 256\)'):
        agent.predict(np.zeros((3, 4), np.float32), state=np.zeros((2, 256)))
    feedforward = PPO.from_env('CartPole-v1', n_envs=2, quiet=True)
    action, state = feedforward.predict(np.zeros(4, np.float32))
    assert np.shape(action) == () and state is None
    with pytest.raises(ValueError, match='PPO has no memory: state and episode_start are for recurrent policies'):
        feedforward.predict(np.zeros(4, np.float32), state=np.zeros(8))


@pytest.mark.parametrize('format', FORMATS)
def test_an_export_carries_the_state_as_predict_does(format, tmp_path):
    agent = A2C.from_env('CartPoleNoVel-v1', n_envs=2, recurrent='gru', seed=1, quiet=True,
                         normalize_observations=True)
    agent.fit(max_steps=200)
    exported = load_exported(agent.export(str(tmp_path / f'policy.{format}'), format), format)
    rng = np.random.default_rng(0)
    state = exported_state = None
    for step in range(4):
        observations = rng.normal(size=(3, 4)).astype(np.float32)
        starts = np.array([step == 0, step == 2, False])
        actions, state = agent.predict(observations, state=state, episode_start=starts)
        exported_actions, exported_state = exported(observations, state=exported_state, episode_start=starts)
        np.testing.assert_array_equal(exported_actions, actions)
        np.testing.assert_allclose(exported_state, state, atol=1e-5)


def test_save_load_evaluate_and_play_keep_the_memory(tmp_path):
    agent = PPO.from_env('CartPoleNoVel-v1', n_envs=2, n_steps=16, recurrent='lstm', seed=0, quiet=True)
    agent.fit(max_steps=200)
    agent.save(str(tmp_path / 'saved'))
    loaded = PPO.load(str(tmp_path / 'saved'))
    assert loaded.recurrent == 'lstm' and loaded.sequence_length == agent.sequence_length == 16
    observations = np.random.default_rng(0).normal(size=(4, 4)).astype(np.float32)
    for a, b in zip(agent.predict(observations), loaded.predict(observations)):
        np.testing.assert_allclose(a, b, atol=1e-6)
    assert agent.evaluate(episodes=2, seed=5).returns.tolist() == loaded.evaluate(episodes=2, seed=5).returns.tolist()
    assert loaded.play(seed=5).returns.tolist() == loaded.evaluate(episodes=1, seed=5).returns.tolist()


@pytest.mark.parametrize('agent_class', [PPO, A2C])
def test_with_memory_an_agent_recalls_a_cue_that_a_policy_without_memory_cannot(agent_class):
    """Recall-v0 shows a cue only at an episode's first step and scores the last action by it: without memory the
    best deterministic policy scores 1/2."""
    settings = {'n_envs': 8, 'n_steps': 16, 'lr': 3e-3, 'entropy_coef': 0.0, 'seed': 0, 'quiet': True,
                **({'mini_batches': 2} if agent_class is PPO else {'optimizer': 'adam'})}
    recalling = agent_class.from_env('Recall-v0', recurrent='lstm', **settings)
    recalling.fit(max_steps=12_000, target_reward=0.95)
    assert recalling.evaluate(episodes=200, seed=1).mean >= 0.95
    forgetting = agent_class.from_env('Recall-v0', **settings)
    forgetting.fit(max_steps=recalling.steps)
    assert forgetting.evaluate(episodes=200, seed=1).mean <= 0.62


def test_the_command_line_trains_a_recurrent_policy_and_refuses_a_wrong_kind_in_one_line(workdir, xagents_cli):
    status, output, _ = xagents_cli('train', 'ppo', '--env', 'CartPoleNoVel-v1', '--recurrent', 'gru',
                                    '--max-steps', '512', '--n-envs', '2', '--checkpoints', 'model.npz')
    assert status == 0 and os.path.exists('model.npz'), output
    status, output, error = xagents_cli('play', 'ppo', '--env', 'CartPoleNoVel-v1', '--recurrent', 'gru',
                                        '--weights', 'model.npz', '--frame-dir', 'frames', '--max-steps', '5')
    assert status == 0 and len(os.listdir('frames')) == 5, output + error
    status, _, error = xagents_cli('train', 'ppo', '--env', 'CartPoleNoVel-v1', '--recurrent', 'rnn')
    assert status == 2 and "expected recurrent 'lstm' or 'gru'" in error and 'Traceback' not in error
    assert len(error.strip().splitlines()) == 1
    status, output, _ = xagents_cli('train', 'ppo')
    assert '--recurrent' in output and '--sequence-length' in output


def test_memory_advances_and_zeroes_nothing_itself():
    memory = Memory.zeros(2, 3)
    assert memory.starts.all() and not memory.state.any()
    memory.next_state = np.ones((2, 3), np.float32)
    memory.advance(np.array([True, False]))
    assert memory.starts.tolist() == [True, False] and memory.state.sum() == 6 and memory.next_state is None
