"""Hindsight experience replay: where relabelled goals come from (same episode, later step, across the ring's wrap
and each env's column), their rewards, episodes in progress, saving, the refusals, the goal envs and the CLI."""
from __future__ import annotations

import functools

import gymnasium as gym
import numpy as np
import pytest

from xagents import DQN, SAC
from xagents.envs.goal_envs import BitFlipping, PointReach
from xagents.replay.her import HerReplayBuffer
from xagents.envs.observations import DictObservations


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


def pack_list(keys: DictObservations, observations: list) -> np.ndarray:
    """Single Dict observations, as an env returns them, packed into one batch."""
    return keys.pack({key.name: np.stack([each[key.name] for each in observations]) for key in keys.keys})


def tracer_agent(n_envs: int = 3, capacity: int = 10_000, strategy: str = 'future') -> DQN:
    """A DQN with HER on ``n_envs`` Tracers (env ``i`` is Tracer ``i``), acting at random: only its buffer is used."""
    envs = gym.vector.SyncVectorEnv([functools.partial(Tracer, i) for i in range(n_envs)],
                                    autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    agent = DQN(envs, her=True, her_strategy=strategy, buffer_max_size=capacity, buffer_initial_size=n_envs,
                buffer_batch_size=1, update_every=n_envs, gradient_steps=1, start_steps=10 ** 9, seed=0)
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


def whole_ended_episodes(agent: DQN) -> tuple[set, set]:
    """Worked out from the Tracers alone: the ``(env, episode)`` pairs that have ended and whose every transition
    is still in the buffer, and those that have ended but lost their first transitions to the ring's wrap. Env
    ``e``'s column is a stream of slots, an episode of ``n`` steps taking ``n + 1`` (its final observation's
    own), the one in progress its steps so far and the slot of its next observation; a column holds the newest
    ``capacity // n_envs + 1`` slots written."""
    rows = agent.buffer.capacity // agent.n_envs + 1
    whole, cut = set(), set()
    for tracer in (env.unwrapped for env in agent.envs.envs):
        lengths = [2 + (3 * tracer.env + k) % 4 for k in range(tracer.episode)]  # the ended ones
        starts = np.concatenate([[0], np.cumsum(np.add(lengths, 1))])
        written = starts[-1] + (tracer.t + 1 if tracer.t else 0)
        for k, start in enumerate(starts[:-1]):
            if start >= written - rows:
                whole.add((tracer.env, k))
            elif starts[k + 1] > written - rows:
                cut.add((tracer.env, k))
    return whole, cut


# --------------------------------------------------------------------------------------------- relabelling
@pytest.mark.parametrize('strategy', ['future', 'final', 'episode'])
def test_only_whole_ended_episodes_are_sampled_and_goals_come_from_them_where_the_strategy_says(strategy):
    """The ring (13 rows a column) wraps many times; every env column has its own episode lengths; the last
    episodes are in progress and the oldest stored ones partly overwritten: neither is ever sampled, relabelled
    or not (Stable-Baselines3's HerReplayBuffer samples ended episodes stored whole). Each relabelled goal is a
    next observation's achieved goal: ``(env, episode, s)`` with ``s - 1`` the step it was reached at."""
    agent = tracer_agent(capacity=36, strategy=strategy)
    collect(agent, 100)
    buffer, keys = agent.buffer, agent.dict_observations
    whole, cut = whole_ended_episodes(agent)
    assert cut and any(env.unwrapped.t for env in agent.envs.envs)  # episodes cut by the wrap, and in progress
    batch = buffer.sample(500)
    part = relabelled_part(buffer, 500)
    values = goals_of(batch, keys)
    own, goal = values['observation.achieved_goal'], values['observation.desired_goal']
    assert {(int(env), int(episode)) for env, episode, _ in own} == whole  # all of them, and only them
    own, goal = own[:part], goal[:part]
    np.testing.assert_array_equal(goal, values['next.desired_goal'][:part])  # one new goal for both observations
    np.testing.assert_array_equal(goal[:, :2], own[:, :2])  # same env column, same episode
    step, reached = own[:, 2], goal[:, 2] - 1  # the transition's step, the goal's
    last = 2 + (3 * own[:, 0] + own[:, 1]) % 4 - 1  # the episode's true last step
    assert (reached <= last).all()
    if strategy == 'future':
        assert (reached >= step).all() and (reached > step).any() and (reached == step).any()
        assert (reached == last).any() and (reached < last).any()
    elif strategy == 'final':
        np.testing.assert_array_equal(reached, last)
    else:
        assert (reached >= 0).all() and (reached < step).any() and (reached > step).any()
        assert (reached == 0).any()
    # The rest of the batch keeps its own goals.
    np.testing.assert_array_equal(values['observation.desired_goal'][part:, 2], -1)


def test_nothing_is_sampled_before_an_episode_ends_and_learning_waits_for_one(caplog):
    """Stable-Baselines3 raises when asked to sample then; here the buffer says it cannot sample yet, which is
    logged once, and the agent learns from the update after the first episode ends (Tracer 0's first lasts 2
    steps)."""
    caplog.set_level('INFO', 'xagents')
    agent = tracer_agent(n_envs=1)
    assert agent.buffer_initial_size == 1 and agent.update_every == 1
    assert agent.train_once() == {} and int(agent.gradient_updates.numpy()) == 0
    assert [record.message for record in caplog.records if record.name == 'xagents.replay.her'] == [
        'her samples ended episodes and none has ended in 1 env steps: learning waits for one']
    assert len(agent.buffer) == 1 and not agent.buffer.can_sample()
    with pytest.raises(ValueError, match='^her samples transitions of ended episodes, and none of the 1 stored '
                                         'transitions belongs to one yet: add steps until an episode ends$'):
        agent.buffer.sample(1)
    metrics = agent.train_once()  # the episode ends at this step: the update samples it
    assert agent.buffer.can_sample() and metrics and int(agent.gradient_updates.numpy()) == 1


def test_an_episode_longer_than_a_column_is_never_sampled_and_warned_once(caplog):
    """3 transitions a column: Tracer 0's episodes last 2, 3, 4, 5 steps; those of 4 and 5 cannot be held whole."""
    agent = tracer_agent(n_envs=1, capacity=3, strategy='final')
    collect(agent, 14)  # episodes 0-3 ended
    assert not agent.buffer.can_sample()
    collect(agent, 2)  # episode 4 (2 steps) ends
    warnings = [record.message for record in caplog.records if 'her samples whole ended episodes' in record.message]
    assert len(warnings) == 1 and 'the episode of env 0 has run past the 3 transitions its column' in warnings[0]
    own = agent.dict_observations.unpack(agent.buffer.sample(200).observations)['achieved_goal']
    np.testing.assert_array_equal(np.unique(own[:, 1]), [4])


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
    assert (own[:, 1] == 1).any() and set(np.unique(goal[:, 1])) == {0, 1}  # episode 2 is in progress


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
            buffer.add(pack_list(keys, [observations[column]]), [0], [reward], pack_list(keys, [next_observation]),
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


def one_pair_at_a_time(achieved_goal, desired_goal, info):  # what a goal env written for one pair returns
    return float(np.array_equal(achieved_goal, desired_goal)) - 1.0


def raising(achieved_goal, desired_goal, info):
    raise KeyError('distance_threshold')


COMPUTE_REWARD_FAULTS = [
    (one_pair_at_a_time, r'expected one reward per goal pair, shaped \(4,\) for 4 pairs \(her calls a vectorised '
                         r'compute_reward\(achieved_goal, desired_goal, info\), goals shaped \(4, 4\)\), '
                         r'got float -?[01].0$'),
    (lambda achieved, desired, info: np.zeros(3), r'expected one reward per goal pair, shaped \(4,\) for 4 pairs .*'
                                                  r'got an array shaped \(3,\)$'),
    (lambda achieved, desired, info: np.zeros((4, 4)), r'got an array shaped \(4, 4\)$'),
    (lambda achieved, desired, info: np.array([0.0, np.nan, 0.0, np.nan]),
     r'returned nan for achieved_goal \[.*\] and desired_goal \[.*\] \(2 of 4 rewards not finite\)$'),
    (lambda achieved, desired, info: np.full(4, -np.inf), r'returned -inf for .* \(4 of 4 rewards not finite\)$'),
    (lambda achieved, desired, info: ['-1'] * 4, r"expected numbers, got <U2 values such as np.str_\('-1'\)$"),
    (raising, r"KeyError: 'distance_threshold'$"),
]


@pytest.mark.parametrize('compute_reward, message', COMPUTE_REWARD_FAULTS)
def test_a_faulty_compute_reward_is_caught_where_her_calls_it_and_named(compute_reward, message):
    """Raising, one reward for the batch, a wrong length, non-finite or text rewards: an env fault (EnvError, exit
    status 1 in a run) in one line naming compute_reward, not a traceback or a non-finite loss."""
    from xagents.envs.creation import EnvError

    space = BitFlipping(4).observation_space
    keys = DictObservations.of(space)
    buffer = HerReplayBuffer(16, 1, space, gym.spaces.Discrete(4), compute_reward, seed=0)
    observation = pack_list(keys, [space.sample()])
    buffer.add(observation, [0], [-1.0], observation, [True], [False])
    with pytest.raises(EnvError, match='^the goal env in compute_reward at env step 1: .*' + message) as caught:
        buffer.sample(5)
    assert '\n' not in str(caught.value)


class FaultyRewardFlipping(BitFlipping):
    """BitFlipping whose compute_reward gives one number for any batch (written for one goal pair)."""

    def compute_reward(self, achieved_goal, desired_goal, info):
        return one_pair_at_a_time(achieved_goal, desired_goal, info)


def test_cli_a_faulty_compute_reward_ends_training_with_status_1_naming_it(xagents_cli, workdir):
    gym.register('FaultyRewardFlipping-v0', entry_point=FaultyRewardFlipping, kwargs={'n_bits': 4})
    try:
        status, out, err = xagents_cli('train', 'dqn', '--env', 'FaultyRewardFlipping-v0', '--her', '--max-steps',
                                       '400', '--buffer-initial-size', '64', '--buffer-batch-size', '16',
                                       '--gradient-steps', '1', '--history-checkpoint', 'h.parquet')
    finally:
        del gym.registry['FaultyRewardFlipping-v0']
    assert status == 1 and len(err.strip().splitlines()) == 1, err
    assert ('FaultyRewardFlipping-v0 in compute_reward at env step 64: expected one reward per goal pair, shaped '
            '(12,) for 12 pairs') in err and 'Traceback' not in err + out


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
@pytest.mark.backends
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


class MazeLikeFlipping(BitFlipping):
    """BitFlipping reporting success as Gymnasium-Robotics' PointMaze does: ``info['success']``."""

    def reset(self, *, seed=None, options=None):
        observation, info = super().reset(seed=seed, options=options)
        return observation, {'success': info['is_success']}

    def step(self, action):
        *step, info = super().step(action)
        return (*step, {'success': info['is_success']})


def test_success_reported_as_info_success_is_read_as_is_success_is():
    envs = gym.vector.SyncVectorEnv([lambda: BitFlipping(2)], autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    agent = DQN(envs, her=True, seed=0, quiet=True, buffer_initial_size=64, buffer_batch_size=16)
    reported = agent.evaluate(env=BitFlipping(2), episodes=12, seed=5)
    maze_like = agent.evaluate(env=MazeLikeFlipping(2), episodes=12, seed=5)
    assert maze_like.success_rate is not None and 0 < maze_like.success_rate < 1
    np.testing.assert_array_equal(maze_like.successes, reported.successes)


@pytest.mark.backends
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
