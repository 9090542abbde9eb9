"""Action masks: the maths of masked distributions and targets, masks kept by buffers, and no forbidden action
ever sent to an env that says which are allowed."""

import gymnasium as gym
import numpy as np
import pytest
import tensorflow as tf
from keras import ops
from scipy import special

import xagents
from xagents.replay.buffer_state import buffer_state, restore_buffer_state
from xagents.replay.buffers import ReplayBuffer
from xagents.maths.distributions import Categorical
from xagents.envs.creation import EnvError, create_envs
from xagents.envs.masks import masked_logits, masked_logits_np

N_STATES, N_ACTIONS = 7, 5
# Each state allows 1 to 4 of the 5 actions; the allowed action that pays differs by state.
ALLOWED = np.array([[1, 0, 1, 0, 0], [0, 1, 1, 1, 0], [0, 0, 0, 0, 1], [1, 1, 0, 1, 1], [0, 1, 0, 0, 0],
                    [1, 0, 0, 1, 0], [0, 0, 1, 1, 1]], bool)
PAYS = np.array([2, 3, 4, 0, 1, 3, 2])


class CountingEnv(gym.Env):
    """A few-step game whose states allow different actions; it counts (or refuses) the forbidden ones it gets.

    Observations are the state one-hot; an allowed action that pays gives 1; episodes end at random (terminated)
    or after 6 steps (truncated), so that autoreset happens often. ``convention`` says how it offers masks:
    ``'info'`` (Gymnasium's ``info['action_mask']``) or ``'method'`` (SB3-contrib's ``action_masks()``, see
    :class:`MethodEnv`); ``strict`` raises on a forbidden action instead of counting it.
    """

    observation_space = gym.spaces.Box(0.0, 1.0, (N_STATES,), np.float32)
    action_space = gym.spaces.Discrete(N_ACTIONS)

    def __init__(self, convention: str = 'info', strict: bool = False) -> None:
        self.convention, self.strict = convention, strict
        self.invalid = self.actions = 0
        self.state = self.steps = 0

    def _observation(self):
        return np.eye(N_STATES, dtype=np.float32)[self.state]

    def _info(self) -> dict:
        return {'action_mask': ALLOWED[self.state].astype(np.int8)} if self.convention == 'info' else {}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.state, self.steps = int(self.np_random.integers(N_STATES)), 0
        return self._observation(), self._info()

    def step(self, action):
        action = int(action)
        self.actions += 1
        if not ALLOWED[self.state, action]:
            if self.strict:
                raise RuntimeError(f'forbidden action {action} in state {self.state}')
            self.invalid += 1
        reward = float(action == PAYS[self.state])
        self.state, self.steps = int(self.np_random.integers(N_STATES)), self.steps + 1
        terminated = bool(self.np_random.random() < 0.2)
        return self._observation(), reward, terminated, self.steps >= 6 and not terminated, self._info()


class MethodEnv(CountingEnv):
    """The SB3-contrib convention: masks from ``action_masks()`` only."""

    def __init__(self, strict: bool = False) -> None:
        super().__init__('method', strict)

    def action_masks(self) -> np.ndarray:
        return ALLOWED[self.state]


class MultiCountingEnv(CountingEnv):
    """Two choices at once (``MultiDiscrete([5, 5])``): the first from the state's allowed actions, the second from
    those of the state 3 further on; the mask is both concatenated (SB3-contrib's layout). A step counts as
    forbidden if either choice is."""

    action_space = gym.spaces.MultiDiscrete([N_ACTIONS, N_ACTIONS])

    def _allowed(self) -> np.ndarray:
        return np.concatenate([ALLOWED[self.state], ALLOWED[(self.state + 3) % N_STATES]])

    def _info(self) -> dict:
        return {'action_mask': self._allowed().astype(np.int8)}

    def step(self, action):
        first, second = (int(choice) for choice in action)
        allowed = self._allowed()
        forbidden = not (allowed[first] and allowed[N_ACTIONS + second])
        self.actions += 1
        if forbidden and self.strict:
            raise RuntimeError(f'forbidden action {action} in state {self.state}')
        self.invalid += forbidden
        reward = (float(first == PAYS[self.state]) + float(second == PAYS[(self.state + 3) % N_STATES])) / 2
        self.state, self.steps = int(self.np_random.integers(N_STATES)), self.steps + 1
        terminated = bool(self.np_random.random() < 0.2)
        return self._observation(), reward, terminated, self.steps >= 6 and not terminated, self._info()


MULTI_ALLOWED = np.concatenate([ALLOWED, np.roll(ALLOWED, -3, 0)], 1)  # each state's two-choice mask

for _id, _entry in (('MaskedCount-v0', CountingEnv), ('MaskedCountMethod-v0', MethodEnv),
                    ('MaskedMultiCount-v0', MultiCountingEnv)):
    if _id not in gym.registry:
        gym.register(_id, entry_point=_entry)

SETTINGS = {
    'PPO': dict(n_steps=8, mini_batches=2, ppo_epochs=2),
    'A2C': dict(n_steps=5),
    'TRPO': dict(n_steps=8, mini_batches=2, critic_iterations=2),
    'DQN': dict(buffer_initial_size=40, buffer_batch_size=8, update_every=4, epsilon_decay_steps=200,
                buffer_max_size=1000),
    'DQN-double': dict(buffer_initial_size=40, buffer_batch_size=8, update_every=4, epsilon_decay_steps=200,
                       buffer_max_size=1000, double=True, prioritized=True, return_steps=2),
    'QRDQN': dict(buffer_initial_size=40, buffer_batch_size=8, update_every=4, epsilon_decay_steps=200,
                  buffer_max_size=1000, n_quantiles=4),
    'SAC': dict(buffer_initial_size=40, buffer_batch_size=8, update_every=4, gradient_steps=2, buffer_max_size=1000),
}


def make_agent(name: str, env_id: str = 'MaskedCount-v0', n_envs: int = 2, **kwargs):
    agent_class = getattr(xagents, name.split('-')[0])
    return agent_class(create_envs(env_id, n_envs=n_envs, seed=0), seed=0, **{**SETTINGS[name], **kwargs})


def invalid_actions(agent) -> int:
    return sum(env.unwrapped.invalid for env in agent.envs.envs)


# ----------------------------------------------------------------------------- maths
def renormalised(logits: np.ndarray, masks: np.ndarray) -> np.ndarray:
    """The softmax over the allowed actions only, 0 elsewhere (what a masked categorical must be)."""
    probabilities = np.zeros_like(logits, dtype=np.float64)
    for row, (values, allowed) in enumerate(zip(logits, masks)):
        probabilities[row, allowed] = special.softmax(values[allowed].astype(np.float64))
    return probabilities


def test_masked_categorical_log_probs_entropies_and_kl_are_the_renormalised_softmaxs():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(6, N_ACTIONS)).astype(np.float32) * 3
    other = rng.normal(size=(6, N_ACTIONS)).astype(np.float32) * 3
    masks = ALLOWED[:6]
    categorical = Categorical(gym.spaces.Discrete(N_ACTIONS))
    p, q = renormalised(logits, masks), renormalised(other, masks)
    actions = np.array([2, 3, 4, 0, 1, 3])  # allowed ones
    masked, masked_other = masked_logits(tf.constant(logits), masks), masked_logits(tf.constant(other), masks)
    log_probs = categorical.log_prob(masked, actions).numpy()
    np.testing.assert_allclose(log_probs, np.log(p[np.arange(6), actions]), rtol=1e-5, atol=1e-6)
    entropy = -np.sum(np.where(masks, p * np.log(np.where(masks, p, 1.0)), 0.0), -1)
    np.testing.assert_allclose(categorical.entropy(masked).numpy(), entropy, rtol=1e-5, atol=1e-6)
    kl = np.sum(np.where(masks, p * np.log(np.where(masks, p / np.where(masks, q, 1.0), 1.0)), 0.0), -1)
    np.testing.assert_allclose(categorical.kl(masked, masked_other).numpy(), kl, rtol=1e-4, atol=1e-6)
    assert np.isfinite(categorical.entropy(masked).numpy()).all()
    # Sampling: never a masked action, and the log-probabilities it returns are the renormalised ones.
    many = np.repeat(logits, 500, 0)
    sampled, sampled_log_probs = categorical.sample_np(masked_logits_np(many, np.repeat(masks, 500, 0)), rng)
    assert np.repeat(masks, 500, 0)[np.arange(len(sampled)), sampled].all()
    np.testing.assert_allclose(sampled_log_probs, np.log(np.repeat(p, 500, 0)[np.arange(len(sampled)), sampled]),
                               rtol=1e-5, atol=1e-6)
    # Gradients reach the allowed logits only.
    variable = tf.Variable(logits)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(categorical.entropy(masked_logits(variable, masks)))
    gradient = tape.gradient(loss, variable).numpy()
    assert np.all(gradient[~masks] == 0) and np.abs(gradient[masks]).sum() > 0


def test_masked_multi_categorical_is_each_choices_renormalised_softmax():
    """MultiDiscrete masks: each choice's part of the mask renormalises its own softmax; the joint log-probability
    and entropy are the sums over choices (against SciPy), and sampling never draws a masked option."""
    from xagents.maths.multi_distributions import MultiCategorical

    rng = np.random.default_rng(2)
    logits = rng.normal(size=(N_STATES, 2 * N_ACTIONS)).astype(np.float32) * 3
    distribution = MultiCategorical(MultiCountingEnv.action_space)
    masked = masked_logits(tf.constant(logits), MULTI_ALLOWED)
    first = renormalised(logits[:, :N_ACTIONS], MULTI_ALLOWED[:, :N_ACTIONS])
    second = renormalised(logits[:, N_ACTIONS:], MULTI_ALLOWED[:, N_ACTIONS:])
    actions = np.stack([MULTI_ALLOWED[:, :N_ACTIONS].argmax(-1), MULTI_ALLOWED[:, N_ACTIONS:].argmax(-1)], -1)
    rows = np.arange(N_STATES)
    expected = np.log(first[rows, actions[:, 0]]) + np.log(second[rows, actions[:, 1]])
    np.testing.assert_allclose(distribution.log_prob(masked, actions).numpy(), expected, rtol=1e-5, atol=1e-5)
    entropy = sum(special.entr(part).sum(-1) for part in (first, second))
    np.testing.assert_allclose(distribution.entropy(masked).numpy(), entropy, rtol=1e-5, atol=1e-5)
    many, many_masks = np.repeat(logits, 300, 0), np.repeat(MULTI_ALLOWED, 300, 0)
    sampled, log_probs = distribution.sample_np(masked_logits_np(many, many_masks), rng)
    row = np.arange(len(sampled))
    assert many_masks[row, sampled[:, 0]].all() and many_masks[row, N_ACTIONS + sampled[:, 1]].all()
    np.testing.assert_allclose(log_probs, np.log(np.repeat(first, 300, 0)[row, sampled[:, 0]])
                               + np.log(np.repeat(second, 300, 0)[row, sampled[:, 1]]), rtol=1e-5, atol=1e-5)


def test_on_policy_log_prob_entropy_takes_the_rollouts_masks():
    agent = make_agent('PPO')
    logits = tf.constant(np.random.default_rng(1).normal(size=(3, N_ACTIONS)).astype(np.float32))
    masks, actions = ALLOWED[[0, 1, 3]], np.array([0, 3, 4])
    log_probs, entropy = agent.log_prob_entropy(logits, actions, masks)
    p = renormalised(logits.numpy(), masks)
    np.testing.assert_allclose(log_probs.numpy(), np.log(p[np.arange(3), actions]), rtol=1e-5)
    unmasked, _ = agent.log_prob_entropy(logits, actions)
    assert not np.allclose(unmasked.numpy(), log_probs.numpy())


@pytest.mark.backends
def test_ppo_updates_with_the_masks_it_collected_with():
    """The rollout keeps its masks and every epoch uses them: before any step the PPO ratio is exactly 1 with
    them (the log-probabilities match those collected), and not without."""
    agent = make_agent('PPO')
    agent.start_envs()
    rollout = agent.collect()
    n = rollout.actions.size
    columns = (rollout.observations.reshape(n, -1), rollout.actions.reshape(n), rollout.log_probs.reshape(n),
               np.ones(n, np.float32), np.zeros(n, np.float32))
    masks = rollout.action_masks.reshape(n, -1)
    assert not masks.all()
    np.testing.assert_array_equal(masks, ALLOWED[columns[0].argmax(-1)])
    tensors = [ops.convert_to_tensor(column) for column in columns]  # as the compiled update gets them
    _, metrics = agent.minibatch_loss(*tensors, ops.convert_to_tensor(masks))
    assert abs(float(metrics['approx_kl'])) < 1e-6
    _, unmasked = agent.minibatch_loss(*tensors)
    assert float(unmasked['approx_kl']) > 1e-3
    given = {}
    agent.train_step = lambda *arrays, **kwargs: given.update(kwargs) or {}
    agent.gathered = lambda: rollout
    agent.train_once()
    np.testing.assert_array_equal(given['action_masks'], masks)


def fixed_q_model(weights: np.ndarray) -> tf.keras.Model:
    """Q(s) = s @ weights: with one-hot states, row s of ``weights``."""
    inputs = tf.keras.Input((N_STATES,))
    layer = tf.keras.layers.Dense(N_ACTIONS, use_bias=False)
    model = tf.keras.Model(inputs, layer(inputs))
    layer.set_weights([weights.astype(np.float32)])
    return model


@pytest.mark.backends
@pytest.mark.parametrize('double', [False, True])
@pytest.mark.parametrize('name', ['DQN', 'QRDQN'])
def test_dqn_targets_run_over_the_next_states_allowed_actions(double, name):
    """(QR-DQN with one quantile per action: its values are DQN's.)"""
    online = np.zeros((N_STATES, N_ACTIONS))
    target = np.zeros((N_STATES, N_ACTIONS))
    # State 1 allows actions 1, 2, 3. Online Q: the best of all is 4 (forbidden), of the allowed 2.
    online[1] = [9.0, 1.0, 5.0, 3.0, 10.0]
    target[1] = [7.0, 2.0, 0.5, 6.0, 8.0]
    # State 3 allows 0, 1, 3, 4: online's best allowed is 0, target's is 3.
    online[3] = [4.0, 1.0, 20.0, 2.0, 3.0]
    target[3] = [1.0, 0.0, 30.0, 5.0, 2.0]
    agent = make_agent(name, model=fixed_q_model(online), double=double, tau=1.0,
                       **({'n_quantiles': 1} if name == 'QRDQN' else {}))
    agent.target_model.set_weights([target.astype(np.float32)])
    next_observations = np.eye(N_STATES, dtype=np.float32)[[1, 3]]
    values = ops.convert_to_numpy(agent.next_values(next_observations, ALLOWED[[1, 3]]))
    # By hand. Plain DQN: max over allowed of the target's Q: state 1 -> max(2, 0.5, 6) = 6; state 3 ->
    # max(1, 0, 5, 2) = 5. Double DQN: the online network picks (state 1: action 2, state 3: action 0) and the
    # target rates: 0.5 and 1.
    np.testing.assert_allclose(values, [0.5, 1.0] if double else [6.0, 5.0])
    # Without masks the forbidden actions would win: 8 and 30 (plain), target[1][4] = 8 and target[3][2] = 30.
    np.testing.assert_allclose(ops.convert_to_numpy(agent.next_values(next_observations)), [8.0, 30.0])
    # Greedy and exploring actions keep to the mask too.
    observations = np.eye(N_STATES, dtype=np.float32)[[1, 3]]
    np.testing.assert_array_equal(agent.policy(observations, True, ALLOWED[[1, 3]]), [2, 0])
    np.testing.assert_array_equal(agent.predict(observations, action_mask=ALLOWED[[1, 3]])[0], [2, 0])
    agent.epsilon_start = agent.epsilon_end = 1.0  # every action random
    explored = np.stack([agent.explore(observations, ALLOWED[[1, 3]]) for _ in range(200)])
    assert ALLOWED[[1, 3]][np.arange(2), explored].all()
    assert set(explored[:, 0]) == {1, 2, 3}  # uniform over the allowed: each is drawn


@pytest.mark.backends
def test_sac_target_and_entropy_aim_use_the_masks():
    agent = make_agent('SAC')
    next_observations = np.eye(N_STATES, dtype=np.float32)[[2, 3]]  # state 2 allows only action 4
    masks = ALLOWED[[2, 3]]
    logits = ops.convert_to_numpy(agent.actor(next_observations))
    q = np.min(ops.convert_to_numpy(agent.q_values(agent.target_critic, next_observations)), 0)
    alpha = float(np.exp(ops.convert_to_numpy(agent.log_alpha)))
    p = renormalised(logits, masks)
    expected = np.sum(np.where(masks, p * (q - alpha * np.log(np.where(masks, p, 1.0))), 0.0), -1)
    np.testing.assert_allclose(ops.convert_to_numpy(agent.next_values(next_observations, None, masks)), expected,
                               rtol=1e-5)
    assert expected[0] == pytest.approx(q[0, 4], rel=1e-5)  # one allowed action: its value, no entropy
    aims = ops.convert_to_numpy(agent.reachable_entropy(masks))
    np.testing.assert_allclose(aims, 0.89 * np.log([1, 4]), rtol=1e-5)


# ------------------------------------------------------------------------------ buffers
def test_replay_buffer_keeps_each_observations_mask_and_round_trips_it():
    space = gym.spaces.Box(0.0, 1.0, (N_STATES,), np.float32)
    buffer = ReplayBuffer(40, 2, space, gym.spaces.Discrete(N_ACTIONS), seed=0)
    eye = np.eye(N_STATES, dtype=np.float32)
    states = np.array([[0, 1], [2, 3], [4, 5], [6, 0], [1, 2]])
    for t in range(4):
        ended = np.array([t == 1, False])  # env 0's episode ends at step 1: its next slot holds the final state
        buffer.add(eye[states[t]], np.zeros(2, np.int64), np.ones(2), eye[states[t + 1]], ended, np.zeros(2, bool),
                   action_masks=ALLOWED[states[t]], next_action_masks=ALLOWED[states[t + 1]])
    batch = buffer.sample(64)
    observed, following = batch.observations.argmax(-1), batch.next_observations.argmax(-1)
    np.testing.assert_array_equal(batch.action_masks, ALLOWED[observed])
    np.testing.assert_array_equal(batch.next_action_masks, ALLOWED[following])
    restored = ReplayBuffer(40, 2, space, gym.spaces.Discrete(N_ACTIONS), seed=0)
    restore_buffer_state(restored, buffer_state(buffer))
    np.testing.assert_array_equal(restored._masks, buffer._masks)
    again = restored.sample(64)
    np.testing.assert_array_equal(again.next_action_masks, ALLOWED[again.next_observations.argmax(-1)])
    plain = ReplayBuffer(40, 2, space, gym.spaces.Discrete(N_ACTIONS), seed=0)  # no masks: none stored, none sampled
    plain.add(eye[[0, 1]], np.zeros(2, np.int64), np.ones(2), eye[[1, 2]], np.zeros(2, bool), np.zeros(2, bool))
    assert plain.sample(4).action_masks is None and 'buffer/_masks' not in buffer_state(plain)


def test_a_saved_dqn_keeps_its_buffers_masks(tmp_path):
    agent = make_agent('DQN')
    agent.fit(max_steps=60, quiet=True)
    agent.save(str(tmp_path / 'dqn'), include_buffer=True)
    loaded = xagents.DQN.load(str(tmp_path / 'dqn'))
    np.testing.assert_array_equal(loaded.buffer._masks, agent.buffer._masks)
    assert not loaded.buffer._masks.all()


# ------------------------------------------------------------------- never a forbidden action
@pytest.mark.backends
@pytest.mark.parametrize('name', list(SETTINGS))
@pytest.mark.parametrize('env_id', ['MaskedCount-v0', 'MaskedCountMethod-v0'])
def test_no_forbidden_action_reaches_an_env_that_offers_masks(name, env_id):
    agent = make_agent(name, env_id)
    agent.fit(max_steps=200, quiet=True)
    assert agent.masks is not None
    assert invalid_actions(agent) == 0
    agent.evaluate(4, env=agent.envs)
    assert invalid_actions(agent) == 0
    unmasked = make_agent(name, env_id, action_masks=False)
    unmasked.fit(max_steps=200, quiet=True)
    assert unmasked.masks is None and invalid_actions(unmasked) > 0


@pytest.mark.backends
@pytest.mark.parametrize('name', ['PPO', 'A2C', 'TRPO'])
def test_no_forbidden_choice_reaches_a_multi_discrete_env_that_offers_masks(name):
    agent = make_agent(name, 'MaskedMultiCount-v0')
    agent.fit(max_steps=200, quiet=True)
    assert agent.masks.shape == (2, 2 * N_ACTIONS) and invalid_actions(agent) == 0
    agent.evaluate(4, env=agent.envs)
    assert invalid_actions(agent) == 0
    unmasked = make_agent(name, 'MaskedMultiCount-v0', action_masks=False)
    unmasked.fit(max_steps=200, quiet=True)
    assert unmasked.masks is None and invalid_actions(unmasked) > 0


def test_multi_discrete_predict_and_export_take_masks(tmp_path):
    from xagents.storage.export import load_exported

    agent = make_agent('PPO', 'MaskedMultiCount-v0')
    observations = np.eye(N_STATES, dtype=np.float32)
    actions, _ = agent.predict(observations, action_mask=MULTI_ALLOWED)
    assert actions.shape == (N_STATES, 2)
    assert MULTI_ALLOWED[np.arange(N_STATES), actions[:, 0]].all()
    assert MULTI_ALLOWED[np.arange(N_STATES), N_ACTIONS + actions[:, 1]].all()
    exported = load_exported(agent.export(str(tmp_path / 'masked'), action_mask=True))
    np.testing.assert_array_equal(exported(observations, MULTI_ALLOWED), actions)
    one_choice_closed = MULTI_ALLOWED[2].copy()
    one_choice_closed[N_ACTIONS:] = False
    with pytest.raises(ValueError, match='no option of choice 1, entries 5-9'):
        agent.predict(observations[2], action_mask=one_choice_closed)


def test_masks_come_from_subprocess_envs_and_a_forbidden_action_would_fail_the_run():
    strict = {'env_kwargs': {'strict': True}}
    envs = create_envs('MaskedCountMethod-v0', n_envs=2, seed=0, async_envs=True, **strict)
    try:
        agent = xagents.PPO(envs, seed=0, **SETTINGS['PPO'])
        agent.fit(max_steps=160, quiet=True)  # a forbidden action would raise in a subprocess env
    finally:
        envs.close()
    unmasked = xagents.PPO(create_envs('MaskedCount-v0', n_envs=2, seed=0, **strict), seed=0, action_masks=False,
                           **SETTINGS['PPO'])
    with pytest.raises(EnvError, match='forbidden action'):
        unmasked.fit(max_steps=160, quiet=True)


def test_an_env_that_allows_no_action_is_named():
    agent = make_agent('PPO')
    agent.start_envs()
    with pytest.raises(EnvError, match='allows no action'):
        agent.take_masks({'action_mask': np.zeros((2, N_ACTIONS), np.int8)}, np.zeros(2, bool))


def test_masks_follow_autoreset_final_masks_come_from_final_info():
    agent = make_agent('DQN')
    agent.start_envs()
    info = {'action_mask': ALLOWED[[0, 1]].astype(np.int8), '_action_mask': np.ones(2, bool),
            'final_info': {'action_mask': ALLOWED[[2, 2]].astype(np.int8), '_action_mask': np.array([False, True])}}
    agent.take_masks(info, np.array([False, True]))
    np.testing.assert_array_equal(agent.masks, ALLOWED[[0, 1]])  # the reset state's: what the next action obeys
    np.testing.assert_array_equal(agent.final_step_masks, ALLOWED[[0, 2]])  # the final state's, for bootstraps


# --------------------------------------------------------------------------- predict and export
def test_predict_and_exports_take_masks(tmp_path):
    from xagents.storage.export import load_exported

    agent = make_agent('PPO')
    observations = np.eye(N_STATES, dtype=np.float32)
    actions, _ = agent.predict(observations, action_mask=ALLOWED)
    assert ALLOWED[np.arange(N_STATES), actions].all()
    assert agent.predict(observations[2], action_mask=ALLOWED[2])[0] == 4
    with pytest.raises(ValueError, match='allows no action'):
        agent.predict(observations[2], action_mask=np.zeros(N_ACTIONS))
    masked = load_exported(agent.export(str(tmp_path / 'masked'), action_mask=True))
    np.testing.assert_array_equal(masked(observations, ALLOWED), actions)
    plain = load_exported(agent.export(str(tmp_path / 'plain')))
    np.testing.assert_array_equal(plain(observations), agent.predict(observations)[0])
    for format in ('onnx', 'tflite'):
        try:
            exported = load_exported(agent.export(str(tmp_path / f'masked.{format}'), action_mask=True))
        except ImportError:
            continue
        np.testing.assert_array_equal(exported(observations, ALLOWED), actions)


def test_agents_that_do_not_mask_say_so():
    agent = xagents.DDPG(create_envs('Pendulum-v1', seed=0), seed=0, buffer_initial_size=10, buffer_batch_size=5)
    with pytest.raises(ValueError, match='takes no action mask'):
        agent.predict(np.zeros(3, np.float32), action_mask=np.ones(1))


def test_the_command_line_turns_masks_off(xagents_cli, workdir):
    status, _, error = xagents_cli('train', 'ppo', '--env', 'MaskedCount-v0', '--n-envs', '2', '--n-steps', '8',
                                   '--mini-batches', '2', '--max-steps', '32', '--no-action-masks', '--quiet')
    assert status == 0, error


def test_play_acts_within_the_masks():
    strict = {'env_kwargs': {'strict': True}}
    agent = xagents.DQN(create_envs('MaskedCount-v0', n_envs=2, seed=0, **strict), seed=0, **SETTINGS['DQN'])
    assert len(agent.play(episodes=3).returns) == 3  # a forbidden action would raise in the env
    unmasked = xagents.DQN(create_envs('MaskedCount-v0', n_envs=2, seed=0, **strict), seed=0, action_masks=False,
                           **SETTINGS['DQN'])
    with pytest.raises(RuntimeError, match='forbidden action'):
        unmasked.play(episodes=20)


def test_an_agent_that_does_not_mask_says_so_once(caplog):
    agent = xagents.ACER(create_envs('MaskedCount-v0', n_envs=2, seed=0), seed=0, buffer_max_size=2,
                         buffer_initial_size=1)
    agent.fit(max_steps=40, quiet=True)
    assert caplog.text.count('does not use') == 1 and agent.masks is None
