"""MultiDiscrete and MultiBinary actions: the distributions against SciPy, the agents that take them (acting,
updating, saving, evaluating, playing, exporting with env-ready actions), the agents that refuse them, and
learning a task whose optimum is known."""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import tensorflow as tf
from scipy import special, stats

import xagents.envs.toy_envs  # noqa: F401  (registers MatchTargets-v0)
from xagents import A2C, PPO, TRPO
from xagents.registry import AGENTS, agent_class
from xagents.storage.export import FORMATS, load_exported
from xagents.maths.multi_distributions import MultiBernoulli, MultiCategorical
from xagents.envs.spaces import ACTION_SPACE_AGENTS
from xagents.envs.toy_envs import MatchTargets

RNG = np.random.default_rng(0)
NVEC = np.array([2, 4, 3])
LOGITS = RNG.normal(0, 2, (6, NVEC.sum())).astype(np.float32)
OTHER_LOGITS = RNG.normal(0, 2, (6, NVEC.sum())).astype(np.float32)
BIT_LOGITS = RNG.normal(0, 2, (6, 5)).astype(np.float32)
OTHER_BIT_LOGITS = RNG.normal(0, 2, (6, 5)).astype(np.float32)
MATCH = 'xagents.envs.toy_envs:MatchTargets-v0'
START = [1, -2, 5]


def sub_probabilities(logits):
    """Per sub-space probabilities of ``(B, sum(NVEC))`` logits: a list of ``(B, NVEC[i])`` arrays."""
    return [special.softmax(part.astype(np.float64), axis=-1) for part in np.split(logits, np.cumsum(NVEC)[:-1], -1)]


def graph(function, *arguments):
    return tf.function(function)(*(tf.constant(argument) for argument in arguments)).numpy()


# ---------------------------------------------------------------------------------------- distributions
def test_multi_categorical_log_prob_entropy_kl_and_mode_match_scipy():
    distribution = MultiCategorical(gym.spaces.MultiDiscrete(NVEC))
    assert distribution.output_units() == 9
    actions = np.array([[0, 3, 2], [1, 0, 0], [1, 1, 1], [0, 2, 2], [1, 3, 0], [0, 0, 1]])
    p, q = sub_probabilities(LOGITS), sub_probabilities(OTHER_LOGITS)
    # log P(a) = sum_i log multinomial(one_hot(a_i); 1, p_i)
    expected = sum(stats.multinomial.logpmf(np.eye(n)[actions[:, i]], 1, p[i]) for i, n in enumerate(NVEC))
    for run in (lambda f, *a: f(*a).numpy(), graph):
        np.testing.assert_allclose(run(distribution.log_prob, LOGITS, actions), expected, rtol=1e-5)
        np.testing.assert_allclose(run(distribution.entropy, LOGITS), sum(stats.entropy(pi, axis=-1) for pi in p),
                                   rtol=1e-5)
        np.testing.assert_allclose(run(distribution.kl, LOGITS, OTHER_LOGITS),
                                   sum(stats.entropy(pi, qi, axis=-1) for pi, qi in zip(p, q)), rtol=1e-4)
        np.testing.assert_allclose(run(distribution.kl, LOGITS, LOGITS), 0, atol=1e-5)
        np.testing.assert_array_equal(run(distribution.mode, LOGITS), np.stack([pi.argmax(-1) for pi in p], -1))


def test_multi_categorical_samples_follow_each_sub_space_and_report_their_log_probs():
    distribution = MultiCategorical(gym.spaces.MultiDiscrete(NVEC))
    logits = np.repeat(LOGITS[:1], 40_000, axis=0)
    actions, log_probs = distribution.sample_np(logits, np.random.default_rng(1))
    assert actions.shape == (40_000, 3) and log_probs.shape == (40_000,)
    p = sub_probabilities(LOGITS[:1])
    for i, n in enumerate(NVEC):
        np.testing.assert_allclose(np.bincount(actions[:, i], minlength=n) / len(actions), p[i][0], atol=0.01)
    np.testing.assert_allclose(log_probs, sum(np.log(p[i][0][actions[:, i]]) for i in range(3)), rtol=1e-5)
    greedy, greedy_log_probs = distribution.sample_np(LOGITS, np.random.default_rng(1), deterministic=True)
    np.testing.assert_array_equal(greedy, distribution.mode(LOGITS))
    np.testing.assert_allclose(greedy_log_probs, distribution.log_prob(LOGITS, greedy), rtol=1e-5)


def test_multi_bernoulli_log_prob_entropy_kl_and_mode_match_scipy():
    distribution = MultiBernoulli(gym.spaces.MultiBinary(5))
    bits = RNG.integers(0, 2, (6, 5)).astype(np.int8)
    p, q = special.expit(BIT_LOGITS.astype(np.float64)), special.expit(OTHER_BIT_LOGITS.astype(np.float64))
    kl = (stats.entropy(np.stack([p, 1 - p]), np.stack([q, 1 - q]), axis=0)).sum(-1)
    for run in (lambda f, *a: f(*a).numpy(), graph):
        np.testing.assert_allclose(run(distribution.log_prob, BIT_LOGITS, bits), stats.bernoulli.logpmf(bits, p).sum(-1),
                                   rtol=1e-5)
        np.testing.assert_allclose(run(distribution.entropy, BIT_LOGITS), stats.bernoulli.entropy(p).sum(-1), rtol=1e-5)
        np.testing.assert_allclose(run(distribution.kl, BIT_LOGITS, OTHER_BIT_LOGITS), kl, rtol=1e-4)
        np.testing.assert_allclose(run(distribution.kl, BIT_LOGITS, BIT_LOGITS), 0, atol=1e-5)
        np.testing.assert_array_equal(run(distribution.mode, BIT_LOGITS), BIT_LOGITS > 0)


def test_multi_bernoulli_samples_follow_the_probabilities_and_report_their_log_probs():
    distribution = MultiBernoulli(gym.spaces.MultiBinary(5))
    logits = np.repeat(BIT_LOGITS[:1], 40_000, axis=0)
    bits, log_probs = distribution.sample_np(logits, np.random.default_rng(2))
    assert bits.dtype == np.int8 and bits.shape == (40_000, 5)
    p = special.expit(BIT_LOGITS[0].astype(np.float64))
    np.testing.assert_allclose(bits.mean(0), p, atol=0.01)
    np.testing.assert_allclose(log_probs, stats.bernoulli.logpmf(bits, p).sum(-1), rtol=1e-5)
    greedy, _ = distribution.sample_np(BIT_LOGITS, np.random.default_rng(2), deterministic=True)
    np.testing.assert_array_equal(greedy, BIT_LOGITS > 0)


@pytest.mark.parametrize('distribution, logits', [(MultiCategorical(gym.spaces.MultiDiscrete(NVEC)), LOGITS),
                                                  (MultiBernoulli(gym.spaces.MultiBinary(5)), BIT_LOGITS)])
def test_gradients_are_finite_and_reach_only_real_logits(distribution, logits):
    """The padding of shorter sub-spaces gives no nan (0 * -inf) and no gradient."""
    variable = tf.Variable(logits)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(distribution.entropy(variable) + distribution.kl(tf.constant(OTHER_LOGITS if
                             logits is LOGITS else OTHER_BIT_LOGITS), variable))
    gradient = tape.gradient(loss, variable).numpy()
    assert np.isfinite(gradient).all() and (np.abs(gradient) > 0).all()


# --------------------------------------------------------------------------------------------- agents
class AnyChoices(gym.Env):
    """Random observations; actions in a 2-D MultiDiscrete (with a start) or MultiBinary space, each checked."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)

    def __init__(self, action_type: str = 'multi_discrete', render_mode: str | None = None) -> None:
        self.action_space = (gym.spaces.MultiDiscrete([[2, 3], [4, 2]], start=[[0, 1], [-3, 7]])
                             if action_type == 'multi_discrete' else gym.spaces.MultiBinary((2, 3)))
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self.np_random.uniform(-1, 1, 4).astype(np.float32), {}

    def step(self, action):
        if not (isinstance(action, np.ndarray) and action.dtype == self.action_space.dtype
                and self.action_space.contains(action)):
            raise ValueError(f'expected an action in {self.action_space}, got {action!r}')
        self.t += 1
        return self.np_random.uniform(-1, 1, 4).astype(np.float32), float(action.sum()), False, self.t == 6, {}


gym.register('AnyChoices-v0', entry_point=AnyChoices)
ON_POLICY = {PPO: {'n_steps': 16, 'mini_batches': 2}, A2C: {}, TRPO: {'n_steps': 16, 'mini_batches': 2}}
SPACES = {'multi_discrete': ('AnyChoices-v0', {'action_type': 'multi_discrete'}),
          'multi_binary': ('AnyChoices-v0', {'action_type': 'multi_binary'}),
          'match-start': (MATCH, {'start': START})}


def build(cls, space, **settings):
    env_id, env_kwargs = SPACES[space]
    return cls.from_env(env_id, env_kwargs=env_kwargs, n_envs=2, seed=0, quiet=True, **ON_POLICY[cls], **settings)


@pytest.mark.parametrize('space', ['multi_discrete', 'multi_binary'])
@pytest.mark.parametrize('cls', list(ON_POLICY))
def test_predict_gives_env_ready_actions_and_an_update_uses_the_sampled_log_probs(cls, space):
    agent = build(cls, space)
    try:
        action_space = agent.envs.single_action_space
        observations = np.random.default_rng(0).uniform(-1, 1, (7, 4)).astype(np.float32)
        for deterministic in (True, False):
            batch, _ = agent.predict(observations, deterministic=deterministic)
            assert batch.shape == (7, *action_space.shape) and batch.dtype == action_space.dtype
            assert all(action_space.contains(action) for action in batch)
            one, _ = agent.predict(observations[0], deterministic=deterministic)
            assert one.shape == action_space.shape and action_space.contains(one)
        # Acting stores flat choices from 0 and their log-probs; the update's graph computes the same ones.
        agent.start_envs()
        rollout = agent.collect()
        flat = rollout.actions.reshape(-1, rollout.actions.shape[-1])
        assert flat.shape[-1] == int(np.prod(action_space.shape)) and flat.min() >= 0
        params = agent.forward(rollout.observations.reshape(-1, 4))[0]
        log_probs, entropy = agent.log_prob_entropy(tf.constant(params), tf.constant(flat))
        np.testing.assert_allclose(log_probs, rollout.log_probs.reshape(-1), rtol=1e-4, atol=1e-5)
        assert (entropy.numpy() > 0).all()
        before = [weight.numpy().copy() for weight in agent.models[agent.model_roles[0]].trainable_variables]
        metrics = agent.train_once()
        assert all(np.isfinite(float(value)) for value in metrics.values()), metrics
        after = agent.models[agent.model_roles[0]].trainable_variables
        assert any(not np.allclose(old, new.numpy()) for old, new in zip(before, after))
    finally:
        agent.envs.close()


@pytest.mark.backends
@pytest.mark.parametrize('space', ['multi_discrete', 'multi_binary'])
def test_fit_save_load_evaluate_and_play_send_the_env_valid_actions(space, tmp_path):
    """The env raises on any action outside its space, so finishing is the check; a load acts as the saved agent."""
    agent = build(PPO, space)
    try:
        agent.fit(max_steps=200)
        observations = np.random.default_rng(1).uniform(-1, 1, (9, 4)).astype(np.float32)
        path = agent.save(str(tmp_path / 'saved'))
        loaded = PPO.load(path)
        np.testing.assert_array_equal(loaded.predict(observations)[0], agent.predict(observations)[0])
        result = loaded.evaluate(episodes=3)
        assert len(result.returns) == 3 and (result.lengths == 6).all()
        games = loaded.play(episodes=2, max_steps=6)
        assert len(games.returns) == 2
        loaded.envs.close()
    finally:
        agent.envs.close()


@pytest.mark.parametrize('format', FORMATS)
@pytest.mark.parametrize('space', ['multi_discrete', 'multi_binary', 'match-start'])
def test_exports_give_what_predict_gives(space, format, tmp_path):
    if format == 'tflite':
        pytest.importorskip('ai_edge_litert')
    if format == 'onnx':
        pytest.importorskip('tf2onnx')
        pytest.importorskip('onnxruntime')
    agent = build(PPO, space)
    try:
        agent.fit(max_steps=64)
        size = agent.envs.single_observation_space.shape[0]
        observations = np.random.default_rng(5).uniform(-1, 1, (50, size)).astype(np.float32)
        if space == 'match-start':  # one-hot targets, as the env shows them
            observations = np.stack([MatchTargets().reset(seed=seed)[0] for seed in range(50)])
        exported = load_exported(agent.export(str(tmp_path / f'policy.{format}'), format), format)
        expected, _ = agent.predict(observations)
        got = exported(observations)
        assert got.shape == expected.shape == (50, *agent.envs.single_action_space.shape)
        np.testing.assert_array_equal(got, expected)
        assert len(np.unique(expected.reshape(50, -1), axis=0)) > 1  # not a constant policy
        np.testing.assert_array_equal(exported(observations[:1]), expected[:1])
    finally:
        agent.envs.close()


# ------------------------------------------------------------------------------------------- refusals
@pytest.mark.parametrize('name', sorted(AGENTS))
def test_the_table_of_agents_by_action_space_is_what_each_agent_declares(name):
    cls = agent_class(name)
    for kind, agents in ACTION_SPACE_AGENTS.items():
        assert (cls.__name__ in agents) == issubclass(getattr(gym.spaces, kind), cls.supported_action_spaces), kind


@pytest.mark.parametrize('space', ['multi_discrete', 'multi_binary'])
@pytest.mark.parametrize('name', ['dqn', 'ddpg', 'td3', 'sac', 'acer'])
def test_other_agents_refuse_in_one_line_naming_the_agents_that_take_the_space(name, space):
    cls = agent_class(name)
    env_id, env_kwargs = SPACES[space]
    with pytest.raises(ValueError) as raised:
        cls.from_env(env_id, env_kwargs=env_kwargs, n_envs=1, quiet=True)
    kind = 'MultiDiscrete' if space == 'multi_discrete' else 'MultiBinary'
    message = str(raised.value)
    assert message.startswith(f'{cls.__name__} supports ') and f'got {kind}(' in message
    assert message.endswith(f'({kind} actions: PPO, A2C, TRPO)') and '\n' not in message


def test_the_command_line_refuses_in_one_line(xagents_cli):
    status, _, err = xagents_cli('train', 'sac', '--env', MATCH, '--max-steps', '10')
    assert status == 2
    assert err.strip().splitlines() == [
        'xagents train sac: error: SAC supports Discrete, Box action spaces, got '
        'MultiDiscrete([3 3 3]) (MultiDiscrete actions: PPO, A2C, TRPO)']


# ------------------------------------------------------------------------------------------- learning
@pytest.mark.backends
@pytest.mark.parametrize('cls, steps', [(PPO, 20_000), (A2C, 30_000), (TRPO, 20_000)])
def test_learns_the_optimum_of_simultaneous_choices(cls, steps):
    """MatchTargets: 3 choices of 3 options, 10 steps; the optimum scores 10, choosing at random 3.3."""
    agent = cls.from_env(MATCH, env_kwargs={'start': START}, seed=0, quiet=True)
    try:
        agent.fit(max_steps=steps)
        result = agent.evaluate(episodes=10, seed=1)
        assert result.returns.mean() == MatchTargets().optimum
    finally:
        agent.envs.close()
