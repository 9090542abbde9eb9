"""Hindsight experience replay: where relabelled goals come from (same episode, later step, across the ring's wrap
and each env's column), their rewards, episodes in progress, saving, the refusals, the goal envs and the CLI."""
from __future__ import annotations

import functools

import gymnasium as gym
import numpy as np
import pytest

from xagents import DQN, SAC
from xagents.utils.goal_envs import BitFlipping, PointReach
from xagents.utils.her import HerReplayBuffer
from xagents.utils.observations import DictObservations


class Tracer(gym.Env):
    """A goal env whose achieved goal says where it is: ``(env, episode, step)``, the step counted in the
    episode (0 at reset). Episode ``k`` of env ``e`` lasts ``2 + (3 e + k) % 4`` steps and ends terminated when
    ``k`` is even, truncated (a time limit) when odd. The desired goal is ``(e, k, -1)``; the reward, vectorised,
    ``-sum |achieved - desired|``, so each goal pair has its own."""

    def __init__(self, env: int = 0) -> None:
        point = gym.spaces.Box(-1e6, 1e6, (3,), np.float32)
        self.observation_space = gym.spaces.Dict({
            'observation': gym.spaces.Box(-1e6, 1e6, (1,), np.float32), 'achieved_goal': point, 'desired_goal': point})
        self.action_space = gym.spaces.Discrete(2)
        self.env, self.episode, self.t = env, -1, 0

    def length(self) -> int:
        return 2 + (3 * self.env + self.episode) % 4

    def observe(self) -> dict[str, np.ndarray]:
        return {'observation': np.array([self.t], np.float32),
                'achieved_goal': np.array([self.env, self.episode, self.t], np.float32),
                'desired_goal': np.array([self.env, self.episode, -1], np.float32)}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.episode, self.t = self.episode + 1, 0
        return self.observe(), {}

    def step(self, action):
        self.t += 1
        observation = self.observe()
        reward = float(self.compute_reward(observation['achieved_goal'], observation['desired_goal'], {}))
        end = self.t == self.length()
        return observation, reward, end and self.episode % 2 == 0, end and self.episode % 2 == 1, {}

    def compute_reward(self, achieved_goal, desired_goal, info):
        return -np.abs(np.asarray(achieved_goal) - np.asarray(desired_goal)).sum(-1).astype(np.float32)


def tracer_agent(n_envs: int = 3, capacity: int = 10_000, strategy: str = 'future') -> DQN:
    """A DQN with HER on ``n_envs`` Tracers (env ``i`` is Tracer ``i``), acting at random: only its buffer is used."""
    envs = gym.vector.SyncVectorEnv([functools.partial(Tracer, i) for i in range(n_envs)],
                                    autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    agent = DQN(envs, her=True, her_strategy=strategy, buffer_max_size=capacity, buffer_initial_size=n_envs,
                buffer_batch_size=1, update_every=n_envs, start_steps=10 ** 9, seed=0)
    agent.start_envs()
    return agent


def collect(agent: DQN, vector_steps: int) -> None:
    for _ in range(vector_steps):
        agent.store(agent.explore_step())


def goals_of(batch, keys: DictObservations) -> dict[str, np.ndarray]:
    """Each key of the batch's observations and next observations: ``observation.achieved_goal`` ..."""
    return {f'{side}.{name}': value for side, packed in (('observation', batch.observations),
                                                          ('next', batch.next_observations))
            for name, value in keys.unpack(packed).items()}


def relabelled_part(buffer: HerReplayBuffer, batch_size: int) -> int:
    return int(buffer.goals / (buffer.goals + 1) * batch_size)


# --------------------------------------------------------------------------------------------- relabelling
@pytest.mark.parametrize('strategy', ['future', 'final', 'episode'])
def test_relabelled_goals_come_from_the_same_episode_of_the_same_env_where_the_strategy_says(strategy):
    """The ring (13 rows a column) wraps many times; every env column has its own episode lengths; the last
    episodes are in progress. Each relabelled goal is a next observation's achieved goal: ``(env, episode, s)`` with
    ``s - 1`` the step it was reached at."""
    agent = tracer_agent(capacity=36, strategy=strategy)
    collect(agent, 100)
    buffer, keys = agent.buffer, agent.dict_observations
    batch = buffer.sample(500)
    part = relabelled_part(buffer, 500)
    values = goals_of(batch, keys)
    own, goal = values['observation.achieved_goal'][:part], values['observation.desired_goal'][:part]
    np.testing.assert_array_equal(goal, values['next.desired_goal'][:part])  # one new goal for both observations
    np.testing.assert_array_equal(goal[:, :2], own[:, :2])  # same env column, same episode
    step, reached = own[:, 2], goal[:, 2] - 1  # the transition's step, the goal's
    lengths = 2 + (3 * own[:, 0] + own[:, 1]) % 4
    in_progress = own[:, 1] == np.array([env.unwrapped.episode for env in agent.envs.envs])[own[:, 0].astype(int)]
    current = np.array([env.unwrapped.t for env in agent.envs.envs])[own[:, 0].astype(int)]
    last = np.where(in_progress, current - 1, lengths - 1)  # in progress: up to the newest stored step
    assert in_progress.any() and (~in_progress).any()
    assert (reached <= last).all()
    if strategy == 'future':
        assert (reached >= step).all() and (reached > step).any() and (reached == step).any()
    elif strategy == 'final':
        np.testing.assert_array_equal(reached, last)
    else:
        assert (reached >= 0).all() and (reached < step).any() and (reached > step).any()
    # The rest of the batch keeps its own goals.
    np.testing.assert_array_equal(values['observation.desired_goal'][part:, 2], -1)


def test_relabelled_rewards_are_compute_reward_of_the_next_achieved_and_the_new_goal():
    agent = tracer_agent()
    collect(agent, 40)
    batch = agent.buffer.sample(64, batches=3)
    values = goals_of(batch, agent.dict_observations)
    expected = Tracer().compute_reward(values['next.achieved_goal'], values['observation.desired_goal'], {})
    np.testing.assert_array_equal(batch.rewards, expected)  # relabelled or not: the env's own for stored ones
    part = relabelled_part(agent.buffer, 64)
    relabelled = (np.arange(len(batch.rewards)) % 64) < part
    assert (values['observation.desired_goal'][relabelled, 2] >= 1).all()  # three minibatches, each relabelled
    assert (values['observation.desired_goal'][~relabelled, 2] == -1).all()
    assert (batch.rewards[relabelled] == 0).any() and (batch.rewards[relabelled] < 0).any()


def test_relabelled_transitions_keep_the_stored_discount_as_sb3_keeps_the_env_dones():
    agent = tracer_agent()
    collect(agent, 40)
    batch = agent.buffer.sample(400)
    values = goals_of(batch, agent.dict_observations)
    own = values['observation.achieved_goal']
    lengths = 2 + (3 * own[:, 0] + own[:, 1]) % 4
    terminated = (own[:, 2] == lengths - 1) & (own[:, 1] % 2 == 0)
    np.testing.assert_allclose(batch.discounts, np.where(terminated, 0.0, agent.gamma), rtol=1e-6)
    assert terminated[:relabelled_part(agent.buffer, 400)].any()


def test_a_truncated_episodes_last_transition_is_relabelled_with_its_true_final_observation():
    agent = tracer_agent(n_envs=1, strategy='final')
    collect(agent, 6)  # episode 0: 2 steps, terminated; episode 1: 3 steps, truncated; one step of episode 2
    batch = agent.buffer.sample(200)
    values = goals_of(batch, agent.dict_observations)
    part = relabelled_part(agent.buffer, 200)
    own, goal = values['observation.achieved_goal'][:part], values['observation.desired_goal'][:part]
    np.testing.assert_array_equal(goal[own[:, 1] == 1], [[0, 1, 3]] * int((own[:, 1] == 1).sum()))
    assert (own[:, 1] == 1).any() and set(np.unique(goal[:, 1])) == {0, 1, 2}


def test_a_workers_columns_keep_their_own_episodes_and_a_cut_one_ends_there():
    """Columns filled apart (a distributed worker's) and ``truncate``: episodes never run across the cut."""
    keys_space = Tracer().observation_space
    keys = DictObservations.of(keys_space)
    buffer = HerReplayBuffer(64, 2, keys_space, gym.spaces.Discrete(2), Tracer().compute_reward, strategy='final',
                             seed=0)
    envs = [Tracer(0), Tracer(1)]
    observations = [env.reset()[0] for env in envs]
    for step in range(5):
        for column, env in enumerate(envs):
            if step == 3 and column == 1:  # the worker of column 1 restarts with a fresh env
                buffer.truncate(slice(1, 2))
                observations[1] = env.reset()[0]
            next_observation, reward, terminated, truncated, _ = env.step(0)
            buffer.add(keys.pack_list([observations[column]]), [0], [reward], keys.pack_list([next_observation]),
                       [terminated], [truncated], columns=slice(column, column + 1))
            observations[column] = env.reset()[0] if terminated or truncated else next_observation
    batch = buffer.sample(300)
    values = goals_of(batch, keys)
    own, goal = values['observation.achieved_goal'], values['observation.desired_goal']
    part = relabelled_part(buffer, 300)
    cut = (own[:part, 0] == 1) & (own[:part, 1] == 0)  # column 1's first episode, cut after 3 of its 5 steps
    assert cut.any()
    np.testing.assert_array_equal(goal[:part][cut, 2], 3)
    np.testing.assert_array_equal(goal[:part, :2], own[:part, :2])


def test_a_compute_reward_that_is_not_vectorised_is_named_as_such():
    space = BitFlipping(4).observation_space
    keys = DictObservations.of(space)

    def one_pair_at_a_time(achieved_goal, desired_goal, info):  # what a goal env written for one pair returns
        return float(np.array_equal(achieved_goal, desired_goal)) - 1.0

    buffer = HerReplayBuffer(16, 1, space, gym.spaces.Discrete(4), one_pair_at_a_time, seed=0)
    observation = keys.pack_list([space.sample()])
    buffer.add(observation, [0], [-1.0], observation, [False], [False])
    with pytest.raises(ValueError, match=r'her expects compute_reward to be vectorised: 4 goal pairs in, 4 rewards '
                                         r'out, got an array shaped \(\)'):
        buffer.sample(5)


def test_same_seed_relabels_the_same_and_a_restored_buffer_relabels_as_the_original(tmp_path):
    agent = DQN.from_env('BitFlipping-v0', env_kwargs={'n_bits': 6}, seed=3, quiet=True, buffer_max_size=1000,
                         buffer_initial_size=400, buffer_batch_size=32)
    agent.fit(max_steps=320)  # (no update: only the buffer matters here)
    agent.save(str(tmp_path / 'saved'), include_buffer=True)
    loaded = DQN.load(str(tmp_path / 'saved'))
    for name in ('_episodes', '_episode_first', '_episode_last', '_episode_count'):
        np.testing.assert_array_equal(getattr(loaded.buffer, name), getattr(agent.buffer, name))
    assert loaded.buffer.goals == 4 and loaded.buffer.strategy == 'future'
    expected, got = agent.buffer.sample(32, 4), loaded.buffer.sample(32, 4)
    for mine, theirs in zip(got[:6], expected[:6]):
        np.testing.assert_array_equal(mine, theirs)
    assert not np.array_equal(expected.observations, agent.buffer.sample(32, 4).observations)  # draws move on


# ------------------------------------------------------------------------------------------------- agents
def test_relabelled_goals_are_raw_and_normalised_with_the_stored_ones_statistics():
    """The buffer relabels raw values; the agent scales the whole batch after, every goal entry by its statistics."""
    agent = SAC.from_env('PointReach-v0', seed=0, buffer_max_size=1000, buffer_initial_size=100, buffer_batch_size=64)
    assert agent.her and agent.observation_stats is not None  # the preset's
    agent.start_envs()
    for _ in range(100):
        agent.store(agent.explore_step())
    keys = agent.dict_observations
    batch = agent.buffer.sample(64)
    goals = keys.unpack(batch.observations)['desired_goal'][:relabelled_part(agent.buffer, 64)]
    stored = agent.buffer._store.parts['achieved_goal'].data.reshape(-1, 3)
    assert all((stored == goal).all(1).any() for goal in goals)  # raw achieved goals, as stored
    desired = keys.keys[keys.names.index('desired_goal')]
    assert agent.normalized_mask[desired.offset:desired.offset + desired.size].all()
    scaled = keys.unpack(agent.normalized(batch.observations))['desired_goal']
    stats, start = agent.observation_stats, int(agent.normalized_mask[:desired.offset].sum())
    mean, std = stats.mean[start:start + 3], np.sqrt(stats.var[start:start + 3] + 1e-8)
    np.testing.assert_allclose(scaled, np.clip((keys.unpack(batch.observations)['desired_goal'] - mean) / std,
                                                       -agent.observation_clip, agent.observation_clip),
                               rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize('settings, message', [
    ({'env_id': 'CartPole-v1'}, 'her expects goal-env observations, a Dict with keys observation, achieved_goal, '
                                'desired_goal'),
    ({'return_steps': 3}, 'her relabels one-step transitions: expected return_steps 1, got 3'),
    ({'prioritized': True}, 'her samples uniformly: prioritised replay'),
    ({'her_strategy': 'best'}, "expected her_strategy future, final, episode, got 'best'"),
])
def test_what_her_cannot_serve_is_refused_in_one_line(xagents_cli, settings, message):
    env = settings.pop('env_id', 'BitFlipping-v0')
    flags = [part for name, value in settings.items()
             for part in ([f'--{name.replace("_", "-")}'] if value is True else [f'--{name.replace("_", "-")}', str(value)])]
    status, _, err = xagents_cli('train', 'dqn', '--env', env, '--her', '--max-steps', '10', *flags)
    assert status == 2 and len(err.strip().splitlines()) == 1 and message in err, err


def test_an_async_env_not_made_from_an_id_is_refused():
    envs = gym.vector.AsyncVectorEnv([lambda: BitFlipping(4)], autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    try:
        with pytest.raises(ValueError, match="her calls the env's compute_reward in the learner's process"):
            DQN(envs, her=True)
    finally:
        envs.close()


def test_the_goal_envs_reward_as_their_compute_reward_says_and_report_success():
    env = gym.make('BitFlipping-v0', n_bits=5)
    observation, _ = env.reset(seed=0)
    for bit in np.flatnonzero(observation['achieved_goal'] != observation['desired_goal']):
        observation, reward, terminated, truncated, info = env.step(int(bit))
    assert (reward, terminated, info['is_success']) == (0.0, True, True)
    assert env.unwrapped.compute_reward(np.eye(5), np.eye(5)[[0, 2, 2, 3, 0]], {}).tolist() == [0, -1, 0, 0, -1]
    env = gym.make('PointReach-v0')
    observation, _ = env.reset(seed=1)
    rewards = []
    for _ in range(50):
        move = (observation['desired_goal'] - observation['achieved_goal']) / PointReach.step_size
        observation, reward, terminated, truncated, info = env.step(np.clip(move, -1, 1))
        rewards.append(reward)
    assert truncated and not terminated and info['is_success'] and rewards[-1] == 0 and rewards[0] in (0, -1)
    far = np.array([[0.0, 0.0, 0.0], [0.1, 0.0, 0.0]], np.float32)
    assert env.unwrapped.compute_reward(far, np.zeros((2, 3), np.float32), {}).tolist() == [0, -1]


def test_cli_trains_dqn_with_her_on_bit_flipping_and_reports_success(xagents_cli, workdir):
    status, out, err = xagents_cli('train', 'dqn', '--env', 'BitFlipping-v0', '--env-kwargs', 'n_bits=6', '--her',
                                   '--max-steps', '1200', '--seed', '0', '--buffer-max-size', '5000',
                                   '--buffer-initial-size', '200', '--epsilon-decay-steps', '600',
                                   '--eval-frequency', '1200', '--eval-episodes', '20',
                                   '--save-dir', 'saves', '--save-replay-buffer')
    assert status == 0, err
    success = float(out.split('  success ')[-1].split()[0])
    assert 'Maximum steps (1200) reached' in out and success >= 0.8, out[-600:]
    loaded = DQN.load('saves/best-eval')
    assert loaded.her and loaded.buffer.steps >= 1200 and isinstance(loaded.buffer, HerReplayBuffer)
    assert loaded.evaluate(episodes=10).success_rate >= 0.8
