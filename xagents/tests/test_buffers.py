"""Replay buffers driven by real Gymnasium vector envs, the way the training loop drives them.

Envs use SAME_STEP autoreset: an ended episode's step returns the reset observation and the true
final observation in ``info['final_obs']``; the driver substitutes it into ``next_observations``.
"""
import gymnasium as gym
import numpy as np
import pytest
from gymnasium.wrappers import FrameStackObservation, TimeLimit

from xagents.replay.buffers import ReplayBatch, ReplayBuffer
from xagents.replay.prioritized import PrioritizedReplayBuffer, SumTree

BUFFERS = [ReplayBuffer, PrioritizedReplayBuffer]


class CountingEnv(gym.Env):
    """Observation ``[env_id, episode, counter]``; each step adds 1 to counter and rewards it."""

    def __init__(self, env_id: int = 0, terminate_at: int | None = None,
                 box_actions: bool = False) -> None:
        self.env_id, self.terminate_at = env_id, terminate_at
        self.observation_space = gym.spaces.Box(0, 1e6, (3,), np.float32)
        if box_actions:
            self.action_space = gym.spaces.Box(-1, 1, (2,), np.float32)
        else:
            self.action_space = gym.spaces.Discrete(3)
        self.episode, self.counter = -1, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.episode, self.counter = self.episode + 1, 0
        return self._observation(), {}

    def step(self, action):
        self.counter += 1
        terminated = self.terminate_at is not None and self.counter >= self.terminate_at
        return self._observation(), float(self.counter), terminated, False, {}

    def _observation(self):
        return np.array([self.env_id, self.episode, self.counter], np.float32)


class CountingImageEnv(CountingEnv):
    """6x5 uint8 frames encoding env, episode and counter in the first pixels, never all zeros."""

    def __init__(self, env_id: int = 0, terminate_at: int | None = None) -> None:
        super().__init__(env_id, terminate_at)
        self.observation_space = gym.spaces.Box(0, 255, (6, 5), np.uint8)

    def _observation(self):
        fill = 100 + 3 * self.counter + 5 * self.episode + 7 * self.env_id
        frame = np.full((6, 5), fill, np.uint8)
        frame[0, :3] = self.env_id, self.episode, self.counter
        return frame


def make_envs(*specs, box_actions=False):
    """One env per ``(terminate_at, max_episode_steps)``, vectorised with SAME_STEP autoreset."""
    def thunk(i, terminate_at, limit):
        return lambda: TimeLimit(CountingEnv(i, terminate_at, box_actions), limit)
    return gym.vector.SyncVectorEnv([thunk(i, *spec) for i, spec in enumerate(specs)],
                                    autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)


def make_image_envs(*specs, stack_size=4):
    def thunk(i, terminate_at, limit):
        return lambda: FrameStackObservation(
            TimeLimit(CountingImageEnv(i, terminate_at), limit), stack_size)
    return gym.vector.SyncVectorEnv([thunk(i, *spec) for i, spec in enumerate(specs)],
                                    autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)


def drive(envs, buffer, steps, transform=lambda o: o, seed=0):
    """Step ``envs`` as the training loop does; return every ``add``'s arguments."""
    observations, _ = envs.reset(seed=seed)
    envs.action_space.seed(seed)
    added = []
    for _ in range(steps):
        actions = envs.action_space.sample()
        next_observations, rewards, terminated, truncated, info = envs.step(actions)
        final = next_observations.copy()
        for i in np.flatnonzero(info.get('_final_obs', [])):
            final[i] = info['final_obs'][i]
        args = (transform(observations), actions, rewards, transform(final), terminated, truncated)
        buffer.add(*args)
        added.append(args)
        observations = next_observations
    return added


def keys(observations):
    """``(env, episode, counter)`` of each counting-env observation."""
    return [tuple(int(v) for v in o) for o in observations]


def counting_buffer(cls=ReplayBuffer, capacity=64, n_envs=2, box_actions=False, **kwargs):
    env = CountingEnv(box_actions=box_actions)
    return cls(capacity, n_envs, env.observation_space, env.action_space, seed=0, **kwargs)


@pytest.mark.parametrize('box_actions', [False, True])
@pytest.mark.parametrize('cls', BUFFERS)
def test_add_stores_each_vector_step_with_the_space_dtypes(cls, box_actions):
    envs = make_envs((None, 100), (None, 100), box_actions=box_actions)
    buffer = counting_buffer(cls, 16, box_actions=box_actions)
    added = drive(envs, buffer, 5)
    assert len(buffer) == 10 and buffer.steps == 10
    batch = buffer.sample(10)
    assert isinstance(batch, ReplayBatch)
    assert batch.observations.shape == batch.next_observations.shape == (10, 3)
    assert batch.observations.dtype == batch.next_observations.dtype == np.float32
    if box_actions:
        assert batch.actions.shape == (10, 2) and batch.actions.dtype == np.float32
    else:
        assert batch.actions.shape == (10,) and batch.actions.dtype == np.int64
    for name in ('rewards', 'discounts', 'weights'):
        assert getattr(batch, name).shape == (10,) and getattr(batch, name).dtype == np.float32
    assert batch.indices.dtype == np.int64
    actions = {key: action for obs, act, *_ in added for key, action in zip(keys(obs), act)}
    for obs, action, reward, next_obs, discount in zip(*batch[:5]):
        env, episode, counter = obs
        np.testing.assert_array_equal(next_obs, [env, episode, counter + 1])
        assert reward == counter + 1 and discount == np.float32(0.99)
        np.testing.assert_array_equal(action, actions[keys([obs])[0]])
    if cls is ReplayBuffer:
        np.testing.assert_array_equal(batch.weights, 1.0)


def test_ring_wraps_around_keeping_the_newest_transitions():
    buffer = counting_buffer(capacity=8)  # 4 transitions per env
    drive(make_envs((None, 100), (None, 100)), buffer, 10)
    assert len(buffer) == 8
    sampled = keys(buffer.sample(8).observations)
    sampled += keys(np.concatenate([buffer.sample(8).observations for _ in range(300)]))
    # Steps 0..9 observed counters 0..9; the newest four of each env are 6, 7, 8, 9.
    newest = {(env, 0, counter) for env in (0, 1) for counter in range(6, 10)}
    assert set(sampled) == newest
    counts = np.unique(np.array(sampled), axis=0, return_counts=True)[1]
    assert counts.min() > 0.5 * len(sampled) / 8  # roughly uniform (expected 301 each)


def test_each_episode_end_uses_one_slot_for_its_final_observation():
    buffer = counting_buffer(capacity=8, n_envs=1)  # 8 + 1 slots
    drive(make_envs((2, 100)), buffer, 20)
    # Episode e fills slots 3e, 3e + 1 (transitions from counters 0, 1) and 3e + 2 (final
    # observation). After 10 episodes the ring holds slots 21..29: episodes 7, 8 and 9.
    assert len(buffer) == 6
    sampled = {k for _ in range(50) for k in keys(buffer.sample(6).observations)}
    assert sampled == {(0, e, c) for e in (7, 8, 9) for c in (0, 1)}


def test_terminated_stops_bootstrapping_and_truncated_bootstraps_from_the_final_observation():
    # env 0 terminates when its counter reaches 3; env 1 is truncated by TimeLimit at 4.
    buffer = counting_buffer(gamma=0.9)
    drive(make_envs((3, 100), (None, 4)), buffer, 12)
    assert len(buffer) == 24
    batch = buffer.sample(24)
    batches = [batch] + [buffer.sample(24) for _ in range(100)]
    seen = set()
    for b in batches:
        for obs, reward, next_obs, discount in zip(b.observations, b.rewards, b.next_observations,
                                                   b.discounts):
            env, episode, counter = obs
            # Every transition pairs two observations of one episode: no reset transition.
            np.testing.assert_array_equal(next_obs, [env, episode, counter + 1])
            assert reward == counter + 1
            if env == 0 and counter + 1 == 3:
                assert discount == 0.0  # terminated
            else:
                assert discount == np.float32(0.9)  # running, or truncated: bootstrap
            seen.add((int(env), int(counter)))
    # Counters 3 (env 0) and 4 (env 1) are final observations: next, never current.
    assert seen == {(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2), (1, 3)}


def test_the_observation_after_an_episode_end_is_the_reset_observation_of_the_next_transition():
    buffer = counting_buffer(n_envs=1)
    added = drive(make_envs((2, 100)), buffer, 4)
    # Step 1 ends episode 0 with final observation counter 2; step 2 adds the reset observation.
    _, _, _, next_1, terminated_1, _ = added[1]
    observations_2 = added[2][0]
    assert terminated_1[0] and keys(next_1) == [(0, 0, 2)] and keys(observations_2) == [(0, 1, 0)]
    pairs = {(tuple(o), tuple(n)) for b in (buffer.sample(4) for _ in range(50))
             for o, n in zip(keys(b.observations), keys(b.next_observations))}
    assert pairs == {((0, 0, 0), (0, 0, 1)), ((0, 0, 1), (0, 0, 2)),
                     ((0, 1, 0), (0, 1, 1)), ((0, 1, 1), (0, 1, 2))}


# 3-step returns with gamma 0.5; the reward of the step from counter c is c + 1.
# env 0 terminates at counter 4:
#   c=0: 1 + .5*2 + .25*3 = 2.75, discount .5**3 = .125, next counter 3
#   c=1: 2 + .5*3 + .25*4 = 4.5, the third step terminated: discount 0, next counter 4
#   c=2: 3 + .5*4 = 5, discount 0, next 4;  c=3: 4, discount 0, next 4
# env 1 is truncated at counter 3 (cut there too, but bootstrapped):
#   c=0: 1 + .5*2 + .25*3 = 2.75, discount .125, next 3
#   c=1: 2 + .5*3 = 3.5, discount .5**2 = .25, next 3;  c=2: 3, discount .5, next 3
N_STEP_TABLE = {
    (0, 0): (2.75, 0.125, 3), (0, 1): (4.5, 0.0, 4), (0, 2): (5.0, 0.0, 4), (0, 3): (4.0, 0.0, 4),
    (1, 0): (2.75, 0.125, 3), (1, 1): (3.5, 0.25, 3), (1, 2): (3.0, 0.5, 3)}


@pytest.mark.parametrize('cls', BUFFERS)
def test_n_step_returns_match_hand_computed_values(cls):
    buffer = counting_buffer(cls, n_steps=3, gamma=0.5)
    envs = make_envs((4, 100), (None, 3))
    drive(envs, buffer, 8)
    # 8 steps: env 0 ran episodes 0 and 1 to their end; env 1 ran episodes 0, 1 and the first two
    # steps of episode 2, whose 3-step windows are not written yet.
    complete = ({(0, e, c) for e in (0, 1) for c in range(4)}
                | {(1, e, c) for e in (0, 1) for c in range(3)})
    assert len(buffer) == 16 and sample_n_step_keys(buffer) == complete
    # Step 9 writes env 1's truncating step of episode 2 (and env 0's episode 2 starts with
    # counter 0, whose window is 1 step long so far): env 1's two windows are now complete.
    buffer.add(np.array([[0, 2, 0], [1, 2, 2]]), np.array([0, 0]), np.array([1.0, 3.0]),
               np.array([[0, 2, 1], [1, 2, 3]]), np.array([False, False]), np.array([False, True]))
    assert sample_n_step_keys(buffer) == complete | {(1, 2, 0), (1, 2, 1), (1, 2, 2)}


def sample_n_step_keys(buffer):
    """Sample many batches, check each against ``N_STEP_TABLE``, return the keys seen."""
    sampled = set()
    for _ in range(100):
        batch = buffer.sample(14)
        for obs, reward, next_obs, discount in zip(batch.observations, batch.rewards,
                                                   batch.next_observations, batch.discounts):
            env, episode, counter = (int(v) for v in obs)
            expected_return, expected_discount, next_counter = N_STEP_TABLE[env, counter]
            assert reward == pytest.approx(expected_return)
            assert discount == pytest.approx(expected_discount)
            assert keys([next_obs]) == [(env, episode, next_counter)]
            sampled.add((env, episode, counter))
    return sampled


@pytest.mark.parametrize('cls', BUFFERS)
def test_only_complete_n_step_windows_are_sampled(cls):
    added = drive(make_envs((None, 100)), counting_buffer(n_envs=1), 4)
    buffer = counting_buffer(cls, n_envs=1, n_steps=3)
    for args in added[:2]:
        buffer.add(*args)
    with pytest.raises(ValueError, match='expected at least one sampleable'):
        buffer.sample(1)  # 2 transitions, no 3-step window complete
    for args in added[2:]:
        buffer.add(*args)
    # Counters 0 and 1 have 3 steps written (up to counter 4); 2 and 3 do not.
    sampled = np.concatenate([buffer.sample(4).observations[:, 2] for _ in range(50)])
    assert set(sampled.astype(int)) == {0, 1}
    if cls is PrioritizedReplayBuffer:
        assert buffer.tree.total == 2.0  # only counters 0 and 1 entered the tree, at priority 1


def expected_n_step_next(records, key, n_steps):
    """The next observation after up to n_steps steps from ``key``, cut at an episode end."""
    env, episode, counter = key
    for j in range(n_steps):
        _, next_observation, done = records[env, episode, counter + j]
        if done or j == n_steps - 1:
            return next_observation


@pytest.mark.parametrize('n_steps', [1, 3])
@pytest.mark.parametrize('axis', [-1, 0])
@pytest.mark.parametrize('cls', BUFFERS)
def test_frame_stacks_are_rebuilt_as_frame_stack_observation_emitted_them(cls, axis, n_steps):
    # env 0 terminates after 2 steps (shorter than the stack), env 1 is truncated after 5,
    # env 2 terminates after 7; 10 slots per env, 30 steps: the ring wraps about three times.
    envs = make_image_envs((2, 100), (None, 5), (7, 100))
    to_layout = (lambda o: np.moveaxis(o, 1, -1)) if axis == -1 else (lambda o: o)
    space = gym.spaces.Box(0, 255, (6, 5, 4) if axis == -1 else (4, 6, 5), np.uint8)
    buffer = cls(30, 3, space, gym.spaces.Discrete(3), n_steps=n_steps, seed=1,
                 frame_stack_axis=axis)
    added = drive(envs, buffer, 30, transform=to_layout)

    def key(stack):
        newest = stack[..., -1] if axis == -1 else stack[-1]
        return tuple(int(v) for v in newest[0, :3])

    records = {}
    for observations, _, _, next_observations, terminated, truncated in added:
        for o, n, done in zip(observations, next_observations, terminated | truncated):
            records[key(o)] = (o, n, done)
    reset_stacks = [o for o, _, _ in records.values() if key(o)[2] == 0]
    # Gymnasium 1.4's FrameStackObservation pads with the reset frame (padding_type='reset').
    assert all((np.take(o, [-1], axis) == o).all() for o in reset_stacks)
    sampled = set()
    for _ in range(20):
        batch = buffer.sample(len(buffer))
        shape = (len(buffer),) + space.shape
        assert batch.observations.shape == batch.next_observations.shape == shape
        assert batch.observations.dtype == np.uint8
        for o, n in zip(batch.observations, batch.next_observations):
            np.testing.assert_array_equal(o, records[key(o)][0])
            np.testing.assert_array_equal(n, expected_n_step_next(records, key(o), n_steps))
            sampled.add(key(o))
    # Stacks of an episode's first steps (counter < 3) repeat the reset frame; some were sampled.
    assert any(k[2] == 0 for k in sampled) and any(k[2] == 1 for k in sampled)
    assert any(k[0] == 0 and k[2] == 1 for k in sampled)  # final obs of a 2-step episode involved


@pytest.mark.parametrize('cls', BUFFERS)
@pytest.mark.parametrize('n_envs', [1, 8])
def test_atari_frames_cost_at_most_1_1_frames_per_transition(cls, n_envs):
    space = gym.spaces.Box(0, 255, (84, 84, 4), np.uint8)
    buffer = cls(50_000, n_envs, space, gym.spaces.Discrete(6), frame_stack_axis=-1)
    assert buffer.bytes_per_transition <= 1.1 * 84 * 84
    whole = ReplayBuffer(1_000, n_envs, space, gym.spaces.Discrete(6))
    assert whole.bytes_per_transition >= 4 * 84 * 84  # whole stacks: 4 frames each


def four_transition_buffer(**kwargs):
    """Prioritised buffer holding counters 0..3 of one env, and each counter's slot index."""
    buffer = counting_buffer(PrioritizedReplayBuffer, capacity=8, n_envs=1, **kwargs)
    drive(make_envs((None, 100)), buffer, 4)
    batch = buffer.sample(4)  # 4 strata over 4 equal priorities: one each
    index = {int(o[2]): int(i) for o, i in zip(batch.observations, batch.indices)}
    assert sorted(index) == [0, 1, 2, 3]
    return buffer, index


def test_prioritised_sampling_frequencies_follow_priorities():
    buffer, index = four_transition_buffer(alpha=1.0)
    buffer.update_priorities([index[c] for c in range(4)], [1.0, 2.0, 3.0, 4.0])
    counters = np.concatenate([buffer.sample(4).observations[:, 2] for _ in range(10_000)])
    frequencies = np.bincount(counters.astype(int), minlength=4) / len(counters)
    # P(c) = (c + 1) / 10; the binomial std with 40,000 draws is below 0.0025 (stratified: less).
    np.testing.assert_allclose(frequencies, [0.1, 0.2, 0.3, 0.4], atol=0.01)


def test_importance_weights_match_hand_computed_values():
    # 4 adds of beta_steps=8: beta = 0.4 + (1 - 0.4) * 4 / 8 = 0.7.
    buffer, index = four_transition_buffer(alpha=0.5, beta=0.4, beta_steps=8)
    buffer.update_priorities([index[c] for c in range(4)], [1.0, 4.0, 9.0, 16.0])
    # alpha 0.5: leaves sqrt(1, 4, 9, 16) = 1, 2, 3, 4, P(c) = (c + 1) / 10.
    # w = (N P(c)) ** -0.7 / max w, the max being counter 0's: w(c) = (1 / (c + 1)) ** 0.7
    #   = 1, 0.61557, 0.46346, 0.37893.
    # Batches holding counter 0 have it as their max weight, so w matches the list above.
    expected = np.array([1, 0.61557, 0.46346, 0.37893])
    checked = 0
    for _ in range(200):
        batch = buffer.sample(4)
        counters = batch.observations[:, 2].astype(int)
        if 0 in counters:
            np.testing.assert_allclose(batch.weights, expected[counters], rtol=1e-4)
            checked += 1
    assert checked > 50  # P(counter 0 in a batch) = 0.4: about 80 of 200
    assert buffer.beta == pytest.approx(0.7)


def test_beta_anneals_linearly_to_one():
    buffer = counting_buffer(PrioritizedReplayBuffer, capacity=400, beta=0.4, beta_steps=100)
    envs = make_envs((None, 1000), (None, 1000))
    assert buffer.beta == pytest.approx(0.4)
    drive(envs, buffer, 25)  # 50 transitions: 0.4 + 0.6 * 50 / 100
    assert buffer.beta == pytest.approx(0.7)
    drive(envs, buffer, 75)  # 200 transitions: capped at 1
    assert buffer.beta == pytest.approx(1.0)


def test_update_priorities_changes_sampling_and_new_transitions_get_the_max_priority():
    buffer, index = four_transition_buffer(alpha=0.6)
    before = np.concatenate([buffer.sample(4).observations[:, 2] for _ in range(100)])
    assert 70 < np.count_nonzero(before == 2) < 130  # all priorities 1: about 100 of 400
    buffer.update_priorities([index[2]], [1000.0])
    after = np.concatenate([buffer.sample(4).observations[:, 2] for _ in range(100)])
    # P(2) = 1000**0.6 / (1000**0.6 + 3) = 63.1 / 66.1 = 0.955
    assert np.count_nonzero(after == 2) > 360
    assert buffer.max_priority == pytest.approx(1000.0)
    buffer.add(np.array([[0, 0, 4]]), np.array([0]), np.array([5.0]), np.array([[0, 0, 5]]),
               np.array([False]), np.array([False]))
    batches = [buffer.sample(5) for _ in range(20)]  # P(counter 4) = 63.1 / (2 * 63.1 + 3): ~0.49
    new = np.concatenate([b.indices[b.observations[:, 2] == 4] for b in batches])
    assert len(new) and buffer.tree[new[0]] == pytest.approx(1000.0 ** 0.6)


def test_sum_tree_finds_the_prefix_sum_leaf_like_a_cumulative_search():
    rng = np.random.default_rng(0)
    tree = SumTree(13)
    values = rng.random(13)
    values[[2, 7]] = 0.0
    tree.update(np.arange(13), values)
    tree.update(np.array([4, 4, 9]), np.array([0.5, 0.25, 2.0]))  # last write wins on repeats
    values[[4, 9]] = 0.25, 2.0
    assert tree.total == pytest.approx(values.sum())
    np.testing.assert_allclose(tree[np.arange(13)], values)
    u = rng.random(10_000) * values.sum()
    found = tree.find(u)
    np.testing.assert_array_equal(found, np.searchsorted(np.cumsum(values), u, side='right'))
    assert not np.isin(found, [2, 7]).any()
    # Exact boundaries (integer leaves, exact sums): u == sum(leaves[:i]) belongs to leaf i, and
    # zero leaves (0 and 3) are never chosen, not even at u = 0.
    tree = SumTree(6)
    tree.update(np.arange(6), np.array([0.0, 2.0, 1.0, 0.0, 4.0, 1.0]))
    np.testing.assert_array_equal(tree.find(np.array([0.0, 1.9, 2.0, 3.0, 6.99, 7.0])),
                                  [1, 1, 2, 4, 4, 5])


def test_same_seed_gives_the_same_samples():
    batches = []
    for _ in range(2):
        buffer = counting_buffer(capacity=32)
        drive(make_envs((3, 100), (None, 5)), buffer, 12)
        batches.append(buffer.sample(16))
    for a, b in zip(*batches):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize('build, message', [
    (lambda: counting_buffer(capacity=1, n_envs=2), 'expected capacity >= n_envs'),
    (lambda: counting_buffer(capacity=4, n_envs=2, n_steps=3), 'expected capacity // n_envs'),
    (lambda: counting_buffer(n_steps=0), 'expected n_steps >= 1'),
    (lambda: counting_buffer(gamma=1.5), 'expected 0 <= gamma <= 1'),
    (lambda: counting_buffer(frame_stack_axis=0), 'expected frame_stack_axis'),
    (lambda: counting_buffer(PrioritizedReplayBuffer, alpha=-1), 'expected alpha >= 0'),
    (lambda: counting_buffer(PrioritizedReplayBuffer, beta=2), 'expected 0 <= beta <= 1'),
    (lambda: ReplayBuffer(8, 1, gym.spaces.Tuple([gym.spaces.Discrete(2)]),
                          gym.spaces.Discrete(2)), 'expected an observation space'),
])
def test_bad_constructor_arguments_raise_value_error(build, message):
    with pytest.raises(ValueError, match=message):
        build()


def test_bad_add_and_sample_arguments_raise_value_error():
    buffer = counting_buffer(PrioritizedReplayBuffer)
    drive(make_envs((None, 100), (None, 100)), buffer, 2)
    assert len(buffer.sample(5).rewards) == 5  # with replacement: more than the 4 stored
    with pytest.raises(ValueError, match='expected batch_size >= 1, got 0'):
        buffer.sample(0)
    with pytest.raises(ValueError, match='expected batches >= 1, got 0'):
        buffer.sample(4, 0)
    with pytest.raises(ValueError, match='expected a transition to sample, got an empty buffer'):
        counting_buffer().sample(1)
    with pytest.raises(ValueError, match=r'expected observations of shape \(2, 3\), got \(3,\)'):
        buffer.add(np.zeros(3), np.zeros(2), np.zeros(2), np.zeros((2, 3)), np.zeros(2),
                   np.zeros(2))
    with pytest.raises(ValueError, match='expected indices and td_errors of one shape'):
        buffer.update_priorities([0, 1], [1.0])
    with pytest.raises(ValueError, match='expected indices in'):
        buffer.update_priorities([10_000], [1.0])


def sampled_transitions(buffer, draws: int = 400) -> set[tuple]:
    """Every distinct ``(observation, reward, next observation, discount)`` of many samples."""
    batch = buffer.sample(draws)
    return {(float(o[0]), float(r), float(n[0]), float(d)) for o, r, n, d in
            zip(batch.observations, batch.rewards, batch.next_observations, batch.discounts)}


@pytest.mark.parametrize('buffer_class', BUFFERS)
def test_a_workers_columns_fill_alone_and_a_cut_episode_ends_its_windows_as_a_time_limit_would(buffer_class):
    """A distributed run adds each worker's steps to its own columns and cuts the episodes a restarted
    worker lost. Oracle (Sutton & Barto's n-step return with gamma 0.5, by hand): observations 1 -> 2 -> 3
    with rewards 1, 1 cut after the second step give (1, 1 + 0.5, 3, 0.25) and (2, 1, 3, 0.5); the new
    episode 10 -> 11 (reward 4) after the cut starts its own window: (10, 4, 11, 0.5) once it is cut too."""
    space = gym.spaces.Box(-100, 100, (1,), np.float32)
    buffer = buffer_class(40, 2, space, gym.spaces.Discrete(2), n_steps=3, gamma=0.5, seed=0)
    column = slice(1, 2)

    def add(observation, reward, next_observation):
        buffer.add(np.array([[observation]], np.float32), np.array([0]), np.array([reward], np.float32),
                   np.array([[next_observation]], np.float32), np.array([False]), np.array([False]), columns=column)

    add(1, 1, 2)
    add(2, 1, 3)
    assert buffer.steps == 2 and len(buffer) == 2
    with pytest.raises(ValueError):  # two steps of a three-step window: nothing is complete yet
        buffer.sample(4)
    assert buffer.truncate(column).tolist() == [1]
    assert sampled_transitions(buffer) == {(1.0, 1.5, 3.0, 0.25), (2.0, 1.0, 3.0, 0.5)}
    assert buffer.truncate(column).tolist() == []  # nothing in progress: nothing to cut
    add(10, 4, 11)
    assert sampled_transitions(buffer) == {(1.0, 1.5, 3.0, 0.25), (2.0, 1.0, 3.0, 0.5)}
    buffer.truncate()
    assert sampled_transitions(buffer) == {(1.0, 1.5, 3.0, 0.25), (2.0, 1.0, 3.0, 0.5), (10.0, 4.0, 11.0, 0.5)}
    assert set(buffer.sample(200).indices % 2) == {1}  # column 0 was never written


def test_an_actors_estimates_give_each_window_its_n_step_td_error_as_initial_priority():
    """Ape-X: transitions added with an actor's (Q(s, a), V(s')) enter at |Q - (R + discount * V(s'_last))|
    + epsilon once their window is complete, whichever add completes it; a window whose first transition came
    without estimates enters at the largest priority so far. Oracle by hand, gamma 0.5, 2-step windows,
    alpha 1 (priority = |TD error| + epsilon):
      obs 1 (r 1, Q 10), obs 2 (r 2, Q 20, V 6): R = 1 + 0.5 * 2 = 2,  target 2 + 0.25 * 6 = 3.5, TD  6.5
      obs 2, obs 3 (r 4, Q 30, terminated):      R = 2 + 0.5 * 4 = 4,  target 4 (discount 0),   TD 16
      obs 3 alone (terminated):                  R = 4,                target 4,                TD 26
      obs 10 (no estimates), obs 11:             the largest so far,                          26
      obs 11 (r 1, Q 5, V 2), cut by truncate:   R = 1,                target 1 + 0.5 * 2 = 2,  TD  3"""
    space = gym.spaces.Box(-100, 100, (1,), np.float32)
    buffer = PrioritizedReplayBuffer(40, 1, space, gym.spaces.Discrete(2), n_steps=2, gamma=0.5, seed=0, alpha=1.0)

    def add(observation, reward, terminated=False, values=None):
        buffer.add(np.array([[observation]], np.float32), np.array([0]), np.array([reward], np.float32),
                   np.array([[observation + 1]], np.float32), np.array([terminated]), np.array([False]),
                   values=None if values is None else np.array([[values[0]], [values[1]]]))

    add(1, 1, values=(10, 4))
    add(2, 2, values=(20, 6))
    add(3, 4, terminated=True, values=(30, 100))
    add(10, 1)
    add(11, 1, values=(5, 2))
    buffer.truncate()
    batch = buffer.sample(400)
    priorities = {float(o[0]): float(buffer.tree[i]) for o, i in zip(batch.observations, batch.indices)}
    epsilon = buffer.epsilon
    assert priorities == pytest.approx({1.0: 6.5 + epsilon, 2.0: 16 + epsilon, 3.0: 26 + epsilon,
                                        10.0: 26 + epsilon, 11.0: 3 + epsilon})
    assert buffer.max_priority == pytest.approx(26 + epsilon)
    with pytest.raises(ValueError, match=r'expected values of shape \(2, 1\), got \(1,\)'):
        buffer.add(np.zeros((1, 1)), np.zeros(1), np.zeros(1), np.zeros((1, 1)), np.zeros(1), np.zeros(1),
                   values=np.zeros(1))
