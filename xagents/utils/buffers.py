"""NumPy storage for experience: on-policy rollouts and off-policy replay.

Nothing here imports TensorFlow: buffers fill and sample NumPy arrays, agents turn
batches into tensors at the graph boundary.
"""
from __future__ import annotations

import json
import logging
from typing import NamedTuple

import gymnasium as gym
import numpy as np

logger = logging.getLogger(__name__)


class RolloutBuffer:
    """Preallocated ``(n_steps, n_envs, ...)`` arrays for one on-policy rollout.

    Row ``t`` holds what all envs saw and did at vector step ``t``; ``dones[t]`` says the
    episode ended after that step (terminated or truncated), ``rewards[t]`` already includes
    the bootstrapped value of a truncated episode's final observation.
    """

    def __init__(self, n_steps: int, n_envs: int, observation_space: gym.Space,
                 action_space: gym.Space) -> None:
        self.n_steps, self.n_envs = n_steps, n_envs
        shape = (n_steps, n_envs)
        self.observations = np.zeros(shape + observation_space.shape, observation_space.dtype)
        self.actions = np.zeros(shape + action_space.shape, action_space.dtype)
        self.rewards = np.zeros(shape, np.float32)
        self.dones = np.zeros(shape, np.float32)
        self.values = np.zeros(shape, np.float32)
        self.log_probs = np.zeros(shape, np.float32)

    def filled(self, last_values: np.ndarray) -> Rollout:
        """The collected rollout, with the values ``(n_envs,)`` of the observations after it."""
        return Rollout(self.observations, self.actions, self.rewards, self.dones, self.values, self.log_probs,
                       last_values)


class Rollout(NamedTuple):
    """One on-policy rollout: ``(n_steps, n_envs, ...)`` arrays (see :class:`RolloutBuffer`) and
    ``last_values`` ``(n_envs,)``, the values GAE bootstraps from."""

    observations: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    dones: np.ndarray
    values: np.ndarray
    log_probs: np.ndarray
    last_values: np.ndarray


# Off-policy replay
# -----------------
# Every env owns a time column of a ``(rows, n_envs, ...)`` ring, written as a stream of
# observations: one slot per transition holds its observation (or, for frame stacks, only the
# newest frame) plus action, reward and flags, and the slot after it holds the next observation.
# While the episode goes on, that next slot is simply where the following transition is written
# (same observation, so nothing is stored twice). When the episode ends, the slot keeps the true
# final observation (Gymnasium's ``info['final_obs']`` under SAME_STEP autoreset) and the next
# transition starts one slot further on, with the reset observation. The cost is one slot per
# episode end; the gain is that final observations need no side storage and are never lost.

_EMPTY, _TRANSITION, _PENDING, _FINAL = 0, 1, 2, 3  # what a slot holds (``_kinds``)
_MAX_REDRAWS = 32  # rejection rounds before sampling falls back to scanning every slot


class ReplayBatch(NamedTuple):
    """Transitions sampled from a replay buffer, ready for an agent's target.

    The target is ``rewards + discounts * Q(next_observations)``: ``rewards`` already sums the
    discounted rewards of the ``k <= n_steps`` steps taken and ``discounts`` is
    ``gamma ** k * (1 - terminated)``.

    Attributes:
        observations: ``(batch, *observation_shape)``, the observation space's dtype.
        actions: ``(batch, *action_shape)``, the action space's dtype (int64 for Discrete).
        rewards: ``(batch,)`` float32, discounted sum of up to ``n_steps`` rewards.
        next_observations: ``(batch, *observation_shape)``, the observation after the last step
            summed (the true final observation where the episode ended).
        discounts: ``(batch,)`` float32, ``gamma ** k``, or 0 where the episode terminated.
        weights: ``(batch,)`` float32 importance-sampling weights (ones for uniform sampling).
        indices: ``(batch,)`` int64 slot indices, for ``PrioritizedReplayBuffer.update_priorities``.
    """

    observations: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    next_observations: np.ndarray
    discounts: np.ndarray
    weights: np.ndarray
    indices: np.ndarray


class _Window(NamedTuple):
    """Where the parts of sampled transitions live (internal)."""

    ok: np.ndarray  # (batch,) the transition is sampleable
    returns: np.ndarray  # (batch,) float64 discounted reward sums
    discounts: np.ndarray  # (batch,) float64
    observation_rows: np.ndarray  # (batch, stack_size) rows of the observation's frames
    next_rows: np.ndarray  # (batch, stack_size) rows of the next observation's frames
    last_rows: np.ndarray  # (batch,) rows of the window's last transitions


class _ObservationStore:
    """Whole observations, one per slot."""

    stack_size = 1

    def __init__(self, rows: int, n_envs: int, space: gym.Space) -> None:
        self.data = np.zeros((rows, n_envs) + space.shape, space.dtype)

    @property
    def nbytes(self) -> int:
        return self.data.nbytes

    def write(self, rows: np.ndarray, envs: np.ndarray, observations: np.ndarray) -> None:
        self.data[rows, envs] = observations

    def read(self, frame_rows: np.ndarray, envs: np.ndarray) -> np.ndarray:
        return self.data[frame_rows[:, -1], envs]

    def is_self_contained(self, observations: np.ndarray) -> np.ndarray:
        return np.ones(len(observations), bool)


class _FrameStore:
    """Frame stacks stored one frame per slot: the newest frame of each observation.

    A stack is rebuilt from the frames of the ``stack_size`` slots ending at its own, the rows
    having been chosen by the buffer (which knows where episodes start).
    """

    def __init__(self, rows: int, n_envs: int, space: gym.Space, axis: int) -> None:
        self.axis = axis % len(space.shape)
        self.stack_size = space.shape[self.axis]
        self.shape, self.dtype = space.shape, space.dtype
        frame_shape = space.shape[:self.axis] + space.shape[self.axis + 1:]
        self.frames = np.zeros((rows, n_envs) + frame_shape, space.dtype)
        self._newest = (slice(None),) * (self.axis + 1) + (-1,)  # [:, ..., -1] on the stack axis

    @property
    def nbytes(self) -> int:
        return self.frames.nbytes

    def write(self, rows: np.ndarray, envs: np.ndarray, observations: np.ndarray) -> None:
        self.frames[rows, envs] = observations[self._newest]

    def read(self, frame_rows: np.ndarray, envs: np.ndarray) -> np.ndarray:
        stacks = np.empty((len(envs),) + self.shape, self.dtype)
        by_frame = np.moveaxis(stacks, self.axis + 1, 1)  # a view: (batch, stack_size, *frame)
        # One gather per stack position: ~6x faster than transposing a gathered (B, K, H, W)
        # array into channels-last, whose innermost copy loop would run over K only.
        for k in range(self.stack_size):
            by_frame[:, k] = self.frames[frame_rows[:, k], envs]
        return stacks

    def is_self_contained(self, observations: np.ndarray) -> np.ndarray:
        """Whether each stack repeats one frame, as ``FrameStackObservation`` emits at reset."""
        newest = np.expand_dims(observations[self._newest], self.axis + 1)
        return (observations == newest).reshape(len(observations), -1).all(axis=1)


def _stack_axis(space: gym.Space, axis: int) -> int:
    """``axis`` of frame-stack observations as a non-negative index, checked against their shape."""
    ndim = len(space.shape)
    if not -ndim <= axis < ndim or ndim < 2:
        raise ValueError(f'expected frame_stack_axis in [-{ndim}, {ndim}) of observations with at least '
                         f'2 dimensions, got {axis!r} for shape {space.shape}')
    return axis % ndim


def _check_space(space: gym.Space, name: str) -> None:
    if not isinstance(space, gym.Space) or space.shape is None or space.dtype is None:
        raise ValueError(
            f'expected {name} with a fixed shape and dtype (Box, Discrete, MultiDiscrete, '
            f'MultiBinary), got {space!r}')


class ReplayBuffer:
    """Uniform experience replay with n-step returns, for a vector env.

    Storage is a preallocated ring laid out ``(capacity // n_envs + 1, n_envs, ...)``: column
    ``i`` is env ``i``'s stream of transitions in time order, so n-step windows and frame stacks
    are read down one column. ``add`` writes one vector step (all envs at once).

    Expected feeding (Gymnasium vector env with ``autoreset_mode=AutoresetMode.SAME_STEP``): each
    step, ``add(obs, actions, rewards, next_obs, terminated, truncated)`` where ``next_obs[i]`` is
    ``info['final_obs'][i]`` for envs whose episode just ended. The next call's ``obs[i]`` is then
    the reset observation of the new episode, so every stored transition pairs two observations of
    the same episode and no reset transition enters the buffer.

    An episode end also keeps its final observation in a slot of its own, so a full buffer holds
    ``capacity`` transitions less one per stored episode end.

    n-step returns (Sutton & Barto 7.1; Rainbow, https://arxiv.org/abs/1710.02298) sum up to
    ``n_steps`` discounted rewards and stop at the first step that ended the episode.
    Termination stops bootstrapping (discount 0); truncation by a time limit still bootstraps
    from the final observation (discount ``gamma ** k``), see Pardo et al. 2018,
    https://arxiv.org/abs/1712.00378. A transition is sampleable once its window is complete
    (``n_steps`` steps written, or cut short by an episode end).

    Frame stacks (``frame_stack_axis`` set, e.g. 84x84x4 uint8 Atari observations with
    ``frame_stack_axis=-1``) are stored one frame per slot and rebuilt at sampling time. The
    first stacks of an episode repeat the reset frame, as ``FrameStackObservation`` pads by
    default (``padding_type='reset'``). The oldest ``stack_size - 1`` transitions of a column,
    whose earlier frames have been overwritten, are not sampled.
    """

    def __init__(self, capacity: int, n_envs: int, observation_space: gym.Space,
                 action_space: gym.Space, n_steps: int = 1, gamma: float = 0.99,
                 seed: int | np.random.Generator | None = None, frame_stack_axis: int | None = None) -> None:
        """Allocate the storage.

        Args:
            capacity: Total transitions over all envs (rounded down to a multiple of n_envs).
            n_envs: Number of envs of the vector env; each ``add`` brings one transition per env.
            observation_space: The single env's observation space (not the batched one).
            action_space: The single env's action space.
            n_steps: Number of rewards summed into each sampled transition.
            gamma: Discount factor.
            seed: Seed of the sampling generator, or the generator itself.
            frame_stack_axis: None to store observations whole; the stacking axis of frame-stack
                observations (-1 for channels-last ``(H, W, K)``, 0 for ``FrameStackObservation``'s
                ``(K, ...)``) to store each frame once.
        """
        _check_space(observation_space, 'an observation space')
        _check_space(action_space, 'an action space')
        if not isinstance(n_envs, (int, np.integer)) or n_envs < 1:
            raise ValueError(f'expected n_envs >= 1, got {n_envs!r}')
        if not isinstance(capacity, (int, np.integer)) or capacity < n_envs:
            raise ValueError(f'expected capacity >= n_envs = {n_envs}, got {capacity!r}')
        if not isinstance(n_steps, (int, np.integer)) or n_steps < 1:
            raise ValueError(f'expected n_steps >= 1, got {n_steps!r}')
        if not 0.0 <= gamma <= 1.0:
            raise ValueError(f'expected 0 <= gamma <= 1, got {gamma!r}')
        rows = capacity // n_envs + 1  # + 1: the slot after the newest transition
        if frame_stack_axis is None:
            self._store = _ObservationStore(rows, n_envs, observation_space)
        else:
            self._store = _FrameStore(rows, n_envs, observation_space, _stack_axis(observation_space, frame_stack_axis))
        if rows - 1 < n_steps + self._store.stack_size - 1:
            raise ValueError(
                f'expected capacity // n_envs >= n_steps + stack_size - 1 = '
                f'{n_steps + self._store.stack_size - 1}, got {capacity} // {n_envs} = {rows - 1}')
        self.capacity, self.n_envs, self.n_steps, self.gamma = capacity, n_envs, n_steps, gamma
        self.observation_space, self.action_space = observation_space, action_space
        self.rng = np.random.default_rng(seed)
        self._rows = rows
        shape = (rows, n_envs)
        self._actions = np.zeros(shape + action_space.shape, action_space.dtype)
        self._rewards = np.zeros(shape, np.float32)
        self._terminated = np.zeros(shape, bool)
        self._truncated = np.zeros(shape, bool)
        self._starts = np.zeros(shape, bool)  # first observation of an episode
        self._kinds = np.zeros(shape, np.uint8)
        self._stamps = np.full(shape, -2 ** 62, np.int64)  # stream position; -2**62: never written
        self._envs = np.arange(n_envs)
        self._positions = np.zeros(n_envs, np.int64)  # stream position of each env's next add
        self._episode_ended = np.ones(n_envs, bool)
        self._size = 0
        self.steps = 0  # transitions added, over all envs

    def __len__(self) -> int:
        """Number of stored transitions (some may not be sampleable yet, see the class doc)."""
        return self._size

    @property
    def nbytes(self) -> int:
        """Bytes held by the storage arrays."""
        arrays = (self._actions, self._rewards, self._terminated, self._truncated, self._starts,
                  self._kinds, self._stamps)
        return self._store.nbytes + sum(a.nbytes for a in arrays)

    @property
    def bytes_per_transition(self) -> float:
        """``nbytes / capacity``: storage cost of one transition."""
        return self.nbytes / self.capacity

    def add(self, observations: np.ndarray, actions: np.ndarray, rewards: np.ndarray,
            next_observations: np.ndarray, terminated: np.ndarray, truncated: np.ndarray,
            columns: slice | None = None) -> None:
        """Store one vector step, a transition per env (per env of ``columns``, when given).

        Args:
            observations: ``(n_envs, *observation_shape)`` observations the actions were taken in.
            actions: ``(n_envs, *action_shape)``.
            rewards: ``(n_envs,)``.
            next_observations: ``(n_envs, *observation_shape)``, with the true final observation
                (``info['final_obs'][i]``) for envs whose episode ended at this step.
            terminated: ``(n_envs,)`` the episode reached a terminal state.
            truncated: ``(n_envs,)`` the episode was cut (time limit) and will bootstrap.
            columns: The envs these arrays belong to (one worker's, of a distributed run), all by default;
                the arrays then hold one row per env of ``columns``.
        """
        envs = self._envs if columns is None else self._envs[columns]
        n = len(envs)
        observations = self._check_array('observations', observations,
                                         (n,) + self.observation_space.shape)
        next_observations = self._check_array('next_observations', next_observations,
                                              (n,) + self.observation_space.shape)
        actions = self._check_array('actions', actions, (n,) + self.action_space.shape)
        rewards = self._check_array('rewards', rewards, (n,))
        terminated = self._check_array('terminated', terminated, (n,)).astype(bool)
        truncated = self._check_array('truncated', truncated, (n,)).astype(bool)
        done = terminated | truncated
        positions = self._positions[envs]
        rows = positions % self._rows
        next_rows = (positions + 1) % self._rows
        overwritten = (np.count_nonzero(self._kinds[rows, envs] == _TRANSITION)
                       + np.count_nonzero(self._kinds[next_rows, envs] == _TRANSITION))
        starts = self._episode_ended[envs]
        if self.steps == 0:  # unknown history: only a stack repeating one frame is complete
            starts = self._store.is_self_contained(observations)
            if not starts.all():
                logger.warning('first observations are not reset frame stacks: the first '
                               'transitions of envs %s will not be sampled',
                               envs[~starts].tolist())
        self._store.write(rows, envs, observations)
        self._store.write(next_rows, envs, next_observations)
        self._actions[rows, envs] = actions
        self._rewards[rows, envs] = rewards
        self._terminated[rows, envs] = terminated
        self._truncated[rows, envs] = truncated
        self._starts[rows, envs] = starts
        self._starts[next_rows, envs] = False
        self._kinds[rows, envs] = _TRANSITION
        self._kinds[next_rows, envs] = np.where(done, _FINAL, _PENDING)
        self._stamps[rows, envs] = positions
        self._stamps[next_rows, envs] = positions + 1
        self._positions[envs] = positions + 1 + done  # an ended episode keeps its final observation's slot
        self._episode_ended[envs] = done
        self._size += n - overwritten
        self.steps += n

    def truncate(self, columns: slice | None = None) -> np.ndarray:
        """End the episodes in progress in ``columns`` (all envs by default) as a time limit would: their
        last transition bootstraps from its next observation, and the next ``add`` starts a new episode.
        For envs that were reset outside the agent (a distributed worker restarted with fresh envs).

        Returns:
            The envs whose episode was cut.
        """
        envs = self._envs if columns is None else self._envs[columns]
        envs = envs[~self._episode_ended[envs] & (self._positions[envs] > 0)]
        last = (self._positions[envs] - 1) % self._rows
        self._truncated[last, envs] = True
        self._kinds[(last + 1) % self._rows, envs] = _FINAL
        self._positions[envs] += 1
        self._episode_ended[envs] = True
        return envs

    def sample(self, batch_size: int, batches: int = 1) -> ReplayBatch:
        """Sample transitions uniformly, with replacement, among the sampleable ones.

        Args:
            batch_size: Transitions per minibatch.
            batches: Minibatches drawn at once (an agent's gradient steps of one update).

        Returns:
            A ``ReplayBatch`` of ``batches * batch_size`` transitions, minibatch after minibatch,
            with weights of ones.
        """
        self._check_batch_size(batch_size, batches)
        indices = self._accept(self._uniform_indices, batch_size * batches)
        return self._batch(indices, np.ones(batch_size * batches, np.float32))

    def _check_array(self, name: str, value: np.ndarray, shape: tuple) -> np.ndarray:
        value = np.asarray(value)
        if value.shape != shape:
            raise ValueError(f'expected {name} of shape {shape}, got {value.shape}')
        return value

    def _check_batch_size(self, batch_size: int, batches: int) -> None:
        for name, value in (('batch_size', batch_size), ('batches', batches)):
            if not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f'expected {name} >= 1, got {value!r}')
        if not len(self):
            raise ValueError('expected a transition to sample, got an empty buffer')

    def _uniform_indices(self, count: int) -> np.ndarray:
        """Slot indices ``row * n_envs + env`` drawn uniformly among the slots written so far."""
        filled = np.minimum(self._positions + 1, self._rows)  # may include one unwritten slot
        ends = np.cumsum(filled)
        draws = self.rng.integers(0, ends[-1], count)
        envs = np.searchsorted(ends, draws, side='right')
        rows = draws - (ends[envs] - filled[envs])
        return rows * self.n_envs + envs

    def _accept(self, draw, count: int) -> np.ndarray:
        """Rejection sampling: keep drawing slots until ``count`` sampleable ones are found."""
        kept, needed = [], count
        for _ in range(_MAX_REDRAWS):
            indices = draw(needed)
            ok = self._valid(indices)
            kept.append(indices[ok])
            needed -= np.count_nonzero(ok)
            if needed == 0:
                return np.concatenate(kept)
        every = np.arange(self._rows * self.n_envs)  # rare: few sampleable slots, scan them all
        candidates = every[self._window(every // self.n_envs, every % self.n_envs).ok]
        if not len(candidates):
            raise ValueError(
                f'expected at least one sampleable transition (complete {self.n_steps}-step '
                f'window), got none among {len(self)} stored: add more steps before sampling')
        kept.append(self.rng.choice(candidates, needed))
        return np.concatenate(kept)

    def _valid(self, indices: np.ndarray) -> np.ndarray:
        return self._window(indices // self.n_envs, indices % self.n_envs).ok

    def _window(self, rows: np.ndarray, envs: np.ndarray) -> _Window:
        """Locate the n-step window, observation frames and next observation of transitions."""
        stamps = self._stamps[rows, envs]
        ok = self._kinds[rows, envs] == _TRANSITION
        returns = np.zeros(len(rows))
        steps = np.zeros(len(rows), np.int64)
        alive = np.ones(len(rows), bool)
        last = rows
        for j in range(self.n_steps):
            row = (rows + j) % self._rows
            present = ((self._stamps[row, envs] == stamps + j)
                       & (self._kinds[row, envs] == _TRANSITION))
            ok &= ~alive | present  # the window may not run into steps not written yet
            alive &= present
            returns += np.where(alive, self.gamma ** j * self._rewards[row, envs], 0.0)
            steps += alive
            last = np.where(alive, row, last)
            alive &= ~(self._terminated[row, envs] | self._truncated[row, envs])
        next_row = (last + 1) % self._rows
        ok &= self._stamps[next_row, envs] == stamps + steps
        discounts = self.gamma ** steps * ~self._terminated[last, envs]
        observation_rows, history_ok = self._history(rows, envs, stamps)
        last_rows, last_ok = self._history(last, envs, stamps + steps - 1)
        # The next observation's stack is the last step's stack shifted by one frame.
        next_rows = np.concatenate([last_rows[:, 1:], next_row[:, None]], axis=1)
        return _Window(ok & history_ok & last_ok, returns, discounts, observation_rows, next_rows, last)

    def _history(self, rows: np.ndarray, envs: np.ndarray,
                 stamps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Rows of the ``stack_size`` frames (oldest first) of the observations at ``rows``.

        Walks back down the column; from an episode's first slot on, it repeats that slot (the
        reset frame), which is how ``FrameStackObservation`` pads. ``ok`` is False where a frame
        needed has been overwritten.
        """
        size = self._store.stack_size
        frame_rows = np.empty((len(rows), size), np.int64)
        frame_rows[:, -1] = rows
        ok = np.ones(len(rows), bool)
        blocked = self._starts[rows, envs]
        current = rows
        for j in range(1, size):
            previous = (rows - j) % self._rows
            ok &= blocked | (self._stamps[previous, envs] == stamps - j)
            current = np.where(blocked, current, previous)
            frame_rows[:, -1 - j] = current
            blocked = blocked | self._starts[previous, envs]
        return frame_rows, ok

    def _batch(self, indices: np.ndarray, weights: np.ndarray) -> ReplayBatch:
        rows, envs = indices // self.n_envs, indices % self.n_envs
        window = self._window(rows, envs)
        return ReplayBatch(
            observations=self._store.read(window.observation_rows, envs),
            actions=self._actions[rows, envs],
            rewards=window.returns.astype(np.float32),
            next_observations=self._store.read(window.next_rows, envs),
            discounts=window.discounts.astype(np.float32),
            weights=weights.astype(np.float32),
            indices=indices.astype(np.int64))


class SumTree:
    """Array-based binary sum tree with batched updates and a vectorised prefix-sum search.

    Node ``i``'s children are ``2i`` and ``2i + 1``, the root is node 1 and the leaves are the
    last ``leaf_count`` (a power of two) nodes. Every operation loops over the tree's levels,
    never over the items of a batch.
    """

    def __init__(self, size: int) -> None:
        """Create ``size`` leaves of value 0."""
        if size < 1:
            raise ValueError(f'expected size >= 1, got {size!r}')
        self.size = size
        self._depth = (size - 1).bit_length()
        self._leaf_start = 1 << self._depth
        self._nodes = np.zeros(2 * self._leaf_start)

    @property
    def total(self) -> float:
        """Sum of all leaves."""
        return float(self._nodes[1])

    @property
    def nbytes(self) -> int:
        return self._nodes.nbytes

    def __getitem__(self, indices: np.ndarray) -> np.ndarray:
        """Leaf values at ``indices``."""
        return self._nodes[self._leaf_start + np.asarray(indices)]

    def update(self, indices: np.ndarray, values: np.ndarray | float) -> None:
        """Set leaves ``indices`` to ``values`` (the last one wins on repeats) and refresh sums."""
        indices = np.asarray(indices, np.int64)
        values = np.broadcast_to(np.asarray(values, np.float64), indices.shape)
        # NumPy leaves the winner of repeated fancy-index writes unspecified: keep the last.
        last = len(indices) - 1 - np.unique(indices[::-1], return_index=True)[1]
        nodes = self._leaf_start + indices[last]
        self._nodes[nodes] = values[last]
        for _ in range(self._depth):
            nodes = nodes // 2  # repeated parents get the same sum twice, which is harmless
            self._nodes[nodes] = self._nodes[2 * nodes] + self._nodes[2 * nodes + 1]

    def find(self, prefix_sums: np.ndarray) -> np.ndarray:
        """Leaf ``i`` of each prefix sum ``u``: ``sum(leaves[:i]) <= u < sum(leaves[:i + 1])``."""
        u = np.array(prefix_sums, np.float64)
        nodes = np.ones(len(u), np.int64)
        for _ in range(self._depth):
            left = self._nodes[2 * nodes]
            right = u >= left
            u -= left * right
            nodes = 2 * nodes + right
        return nodes - self._leaf_start


class PrioritizedReplayBuffer(ReplayBuffer):
    """Proportional prioritised replay (Schaul et al. 2016, https://arxiv.org/abs/1511.05952).

    Transition ``i`` is sampled with probability ``P(i) = p_i ** alpha / sum_k p_k ** alpha``, with
    ``p_i = |td_error_i| + epsilon`` after ``update_priorities``, or the largest ``p`` seen so far
    when it is stored (unless it came with an actor's estimates, see ``add``). Importance weights
    ``w_i = (N * P(i)) ** -beta / max_j w_j`` are normalised by the batch's largest weight (as
    Dopamine's Rainbow does), so ``N`` cancels.
    ``beta`` grows linearly from its initial value to 1 over ``beta_steps`` added transitions.

    Storage, n-step returns and frame stacks are those of ``ReplayBuffer`` (this class only
    changes how slots are drawn), so ``frame_stack_axis`` works here too. A transition enters the
    sum tree once its n-step window is complete.
    """

    def __init__(self, capacity: int, n_envs: int, observation_space: gym.Space,
                 action_space: gym.Space, n_steps: int = 1, gamma: float = 0.99,
                 seed: int | np.random.Generator | None = None, frame_stack_axis: int | None = None,
                 alpha: float = 0.6, beta: float = 0.4, beta_steps: int = 1_000_000,
                 epsilon: float = 1e-6) -> None:
        """Allocate the storage and the sum tree.

        Args:
            capacity: See ``ReplayBuffer``.
            n_envs: See ``ReplayBuffer``.
            observation_space: See ``ReplayBuffer``.
            action_space: See ``ReplayBuffer``.
            n_steps: See ``ReplayBuffer``.
            gamma: See ``ReplayBuffer``.
            seed: See ``ReplayBuffer``.
            frame_stack_axis: See ``ReplayBuffer``.
            alpha: Priority exponent, 0 for uniform sampling.
            beta: Initial importance-sampling exponent.
            beta_steps: Added transitions (over all envs) after which beta reaches 1.
            epsilon: Added to ``|td_error|`` so that no transition has priority 0.
        """
        super().__init__(capacity, n_envs, observation_space, action_space, n_steps, gamma, seed,
                         frame_stack_axis)
        if alpha < 0:
            raise ValueError(f'expected alpha >= 0, got {alpha!r}')
        if not 0.0 <= beta <= 1.0:
            raise ValueError(f'expected 0 <= beta <= 1, got {beta!r}')
        if beta_steps < 1:
            raise ValueError(f'expected beta_steps >= 1, got {beta_steps!r}')
        if epsilon <= 0:
            raise ValueError(f'expected epsilon > 0, got {epsilon!r}')
        self.alpha, self.initial_beta, self.beta_steps = alpha, beta, beta_steps
        self.epsilon = epsilon
        self.max_priority = 1.0
        self.tree = SumTree(self._rows * n_envs)
        # An actor's (Q(s, a), V(s')) of each transition, where it sent them (see add).
        self._estimates = np.zeros((self._rows, n_envs, 2), np.float32)
        self._estimated = np.zeros((self._rows, n_envs), bool)

    @property
    def beta(self) -> float:
        """Current importance-sampling exponent."""
        progress = min(1.0, self.steps / self.beta_steps)
        return self.initial_beta + (1.0 - self.initial_beta) * progress

    @property
    def nbytes(self) -> int:
        """Bytes held by the storage arrays and the sum tree."""
        return super().nbytes + self.tree.nbytes + self._estimates.nbytes + self._estimated.nbytes

    def add(self, observations: np.ndarray, actions: np.ndarray, rewards: np.ndarray,
            next_observations: np.ndarray, terminated: np.ndarray, truncated: np.ndarray,
            columns: slice | None = None, values: np.ndarray | None = None) -> None:
        """Store one vector step (see ``ReplayBuffer.add``) and give completed windows priority.

        Args:
            values: ``(2, n)``, an actor's estimates for these transitions: the ``Q(s, a)`` it learns and
                the value ``V(s')`` its target bootstraps from (``target = r + discount * V(s')``). A
                window starting and ending in transitions that came with them enters at the priority
                of its n-step TD error, ``|Q(s, a) - (R + discount * V(s'_last))| + epsilon``, as Ape-X
                actors compute it (Horgan et al. 2018, https://arxiv.org/abs/1803.00933); other windows
                at the largest priority seen so far.
        """
        envs = self._envs if columns is None else self._envs[columns]
        positions = self._positions[envs]
        if values is not None:
            values = self._check_array('values', values, (2, len(envs)))
        super().add(observations, actions, rewards, next_observations, terminated, truncated, columns)
        rows = positions % self._rows
        self._estimated[rows, envs] = values is not None
        if values is not None:
            self._estimates[rows, envs] = values.T
        n = self.n_envs
        # The two slots written per env leave the tree (a transition's slot re-enters below when
        # its window is complete), then transitions of the last n_steps adds whose window this
        # step completed enter it. Slots written now hold no priority yet: treat them as 0.
        written = (np.concatenate([positions % self._rows, (positions + 1) % self._rows]) * n
                   + np.tile(envs, 2))
        back = np.arange(self.n_steps)[:, None]
        candidates = (((positions - back) % self._rows) * n + envs).ravel()
        unset = (self.tree[candidates] == 0) | np.isin(candidates, written)
        fresh = candidates[self._valid(candidates) & unset]
        self.tree.update(np.concatenate([written, fresh]),
                         np.concatenate([np.zeros(len(written)), self._initial_priorities(fresh)]))

    def truncate(self, columns: slice | None = None) -> np.ndarray:
        """End the episodes in progress (see ``ReplayBuffer.truncate``); the windows the cut completes
        enter the tree."""
        envs = super().truncate(columns)
        last = self._positions[envs] - 2  # the cut episode's last transition
        candidates = (((last - np.arange(self.n_steps)[:, None]) % self._rows) * self.n_envs + envs).ravel()
        fresh = candidates[self._valid(candidates) & (self.tree[candidates] == 0)]
        self.tree.update(fresh, self._initial_priorities(fresh))
        return envs

    def _initial_priorities(self, indices: np.ndarray) -> np.ndarray:
        """``priority ** alpha`` of transitions whose windows are complete: from the estimates stored
        with the window's first and last transitions (see ``add``), else the largest priority seen."""
        rows, envs = indices // self.n_envs, indices % self.n_envs
        priorities = np.full(len(indices), self.max_priority)
        estimated = np.flatnonzero(self._estimated[rows, envs])  # the local path stops here
        if len(estimated):
            rows, envs = rows[estimated], envs[estimated]
            window = self._window(rows, envs)
            td_errors = self._estimates[rows, envs, 0] - (
                window.returns + window.discounts * self._estimates[window.last_rows, envs, 1])
            known = self._estimated[window.last_rows, envs]
            priorities[estimated[known]] = np.abs(td_errors[known]) + self.epsilon
            if known.any():
                self.max_priority = max(self.max_priority, float(priorities.max()))
        return priorities ** self.alpha

    def sample(self, batch_size: int, batches: int = 1) -> ReplayBatch:
        """Sample transitions in proportion to their priority, each minibatch stratified.

        Every minibatch is a stratified sample of the whole buffer: its ``batch_size`` draws
        fall one in each of ``batch_size`` equal parts of the priority mass, as in the paper.

        Args:
            batch_size: Transitions per minibatch.
            batches: Minibatches drawn at once (an agent's gradient steps of one update).

        Returns:
            A ``ReplayBatch`` of ``batches * batch_size`` transitions, minibatch after minibatch,
            with importance weights (normalised by each minibatch's largest) and the slot
            ``indices`` to update.
        """
        self._check_batch_size(batch_size, batches)
        if self.tree.total <= 0:
            raise ValueError(
                f'expected at least one sampleable transition (complete {self.n_steps}-step '
                f'window), got none among {len(self)} stored: add more steps before sampling')
        total = self.tree.total
        strata = (np.arange(batch_size) + self.rng.random((batches, batch_size))) * (total / batch_size)
        indices = self.tree.find(strata.ravel())
        bad = ~self._sampleable(indices)
        for _ in range(_MAX_REDRAWS):
            if not bad.any():
                break
            # Only frames overwritten under old transitions (or rounding) get here: drop them.
            self.tree.update(indices[bad & (indices < self.tree.size)], 0.0)
            total = self.tree.total
            if total <= 0:
                raise ValueError('expected at least one sampleable transition, got none')
            indices[bad] = self.tree.find(self.rng.random(np.count_nonzero(bad)) * total)
            bad = ~self._sampleable(indices)
        else:
            raise RuntimeError('prioritised sampling kept drawing unsampleable slots')
        probabilities = self.tree[indices] / total
        weights = (probabilities ** -self.beta).reshape(batches, batch_size)
        return self._batch(indices, (weights / weights.max(axis=1, keepdims=True)).ravel())

    def update_priorities(self, indices: np.ndarray, td_errors: np.ndarray) -> None:
        """Set the priorities of sampled transitions to ``|td_errors| + epsilon``.

        Args:
            indices: ``(batch,)`` the ``indices`` of a ``ReplayBatch``.
            td_errors: ``(batch,)`` TD errors of those transitions.
        """
        indices = np.asarray(indices)
        td_errors = np.asarray(td_errors, np.float64)
        if indices.ndim != 1 or td_errors.shape != indices.shape:
            raise ValueError(f'expected indices and td_errors of one shape (batch,), got '
                             f'{indices.shape} and {td_errors.shape}')
        if len(indices) and not (0 <= indices.min() and indices.max() < self.tree.size):
            raise ValueError(f'expected indices in [0, {self.tree.size}), got values from '
                             f'{indices.min()} to {indices.max()}')
        priorities = np.abs(td_errors) + self.epsilon
        live = self.tree[indices] > 0  # slots overwritten since sampling stay out of the tree
        self.tree.update(indices[live], priorities[live] ** self.alpha)
        if len(priorities):
            self.max_priority = max(self.max_priority, float(priorities.max()))

    def _sampleable(self, indices: np.ndarray) -> np.ndarray:
        inside = indices < self.tree.size
        safe = np.where(inside, indices, 0)
        return inside & (self.tree[safe] > 0) & self._valid(safe)


class TrajectorySegment(NamedTuple):
    """``n_steps`` consecutive vector steps of every env, with the policy that acted.

    Attributes:
        observations: ``(n_steps + 1, n_envs, *observation_shape)``: row ``t`` is what step ``t``
            acted on; the last row is the observation after the last step.
        actions: ``(n_steps, n_envs, *action_shape)``.
        rewards: ``(n_steps, n_envs)`` float32.
        dones: ``(n_steps, n_envs)`` float32, 1 where the episode ended after the step.
        policies: ``(n_steps, n_envs, n_actions)`` float32 action probabilities of the behaviour
            policy.
    """

    observations: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    dones: np.ndarray
    policies: np.ndarray


class SegmentBuffer:
    """A preallocated ring of trajectory segments for replaying whole ``n_steps`` windows (ACER).

    Each ``add`` stores one :class:`TrajectorySegment` (every env's column at once), overwriting
    the oldest when full. ``sample`` draws, for each env column, the segment it comes from
    independently, so a batch mixes envs and times (as OpenAI Baselines' ACER buffer does) while
    keeping the ``(n_steps, n_envs)`` shape an agent's graph was traced for.

    Frame stacks (``frame_stack_axis`` set) are stored as frames, as Baselines' ACER buffer does:
    a segment keeps its first observation's stack and the newest frame of every later one,
    ``n_steps + stack_size`` frames per env instead of ``(n_steps + 1) * stack_size``. A stack is
    rebuilt from the frames before it, back to its episode's first observation, whose frame
    ``FrameStackObservation`` repeats (``padding_type='reset'``).
    """

    def __init__(self, capacity: int, n_steps: int, n_envs: int, observation_space: gym.Space,
                 action_space: gym.spaces.Discrete, seed: int | np.random.Generator | None = None,
                 frame_stack_axis: int | None = None) -> None:
        """Allocate the storage.

        Args:
            capacity: Number of segments kept.
            n_steps: Steps per segment.
            n_envs: Env columns per segment.
            observation_space: The single env's observation space.
            action_space: The single env's Discrete action space.
            seed: Seed of the sampling generator, or the generator itself.
            frame_stack_axis: None to store observations whole; the stacking axis of frame-stack
                observations (-1 for channels-last Atari stacks) to store each frame once.
        """
        _check_space(observation_space, 'an observation space')
        if not isinstance(action_space, gym.spaces.Discrete):
            raise ValueError(f'expected a Discrete action space, got {action_space!r}')
        for name, value in (('capacity', capacity), ('n_steps', n_steps), ('n_envs', n_envs)):
            if not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f'expected {name} >= 1, got {value!r}')
        self.capacity, self.n_steps, self.n_envs = capacity, n_steps, n_envs
        self.observation_shape = observation_space.shape
        self.rng = np.random.default_rng(seed)
        shape = (capacity, n_steps, n_envs)
        if frame_stack_axis is None:
            self.stack_axis = None
            self.observations = np.zeros((capacity, n_steps + 1, n_envs) + observation_space.shape,
                                         observation_space.dtype)
        else:
            self.stack_axis = _stack_axis(observation_space, frame_stack_axis)
            self.stack_size = observation_space.shape[self.stack_axis]
            frame_shape = tuple(np.delete(observation_space.shape, self.stack_axis))
            # (capacity, stack_size - 1 + n_steps + 1, n_envs, *frame): the first stack's older
            # frames, then the newest frame of each of the n_steps + 1 observations.
            self.observations = np.zeros((capacity, self.stack_size + n_steps, n_envs) + frame_shape,
                                         observation_space.dtype)
        self.actions = np.zeros(shape + action_space.shape, action_space.dtype)
        self.rewards = np.zeros(shape, np.float32)
        self.dones = np.zeros(shape, np.float32)
        self.policies = np.zeros(shape + (int(action_space.n),), np.float32)
        self._arrays = (self.observations, self.actions, self.rewards, self.dones, self.policies)
        self._next, self._size = 0, 0

    def __len__(self) -> int:
        """Number of stored segments."""
        return self._size

    @property
    def nbytes(self) -> int:
        """Bytes held by the storage arrays."""
        return sum(array.nbytes for array in self._arrays)

    def add(self, segment: TrajectorySegment) -> None:
        """Store a segment, overwriting the oldest one when the buffer is full."""
        expected = (self.n_steps + 1, self.n_envs) + self.observation_shape
        if np.shape(segment.observations) != expected:
            raise ValueError(f'expected observations of shape {expected}, got {np.shape(segment.observations)}')
        for name, array, value in zip(TrajectorySegment._fields[1:], self._arrays[1:], segment[1:]):
            if np.shape(value) != array.shape[1:]:
                raise ValueError(f'expected {name} of shape {array.shape[1:]}, got {np.shape(value)}')
            array[self._next] = value
        if self.stack_axis is None:
            self.observations[self._next] = segment.observations
        else:
            by_frame = np.moveaxis(segment.observations, 2 + self.stack_axis, 2)  # (T + 1, N, K, *frame)
            self.observations[self._next, :self.stack_size] = by_frame[0].swapaxes(0, 1)
            self.observations[self._next, self.stack_size:] = by_frame[1:, :, -1]
        self._next = (self._next + 1) % self.capacity
        self._size = min(self._size + 1, self.capacity)

    def sample(self) -> TrajectorySegment:
        """One segment's worth of steps: env column ``i`` from a uniformly drawn stored segment."""
        if not self._size:
            raise ValueError('expected at least one stored segment, got an empty buffer')
        segments, envs = self.rng.integers(0, self._size, self.n_envs), np.arange(self.n_envs)
        # Indexing [segments, :, envs] puts the env axis first; swap it back behind time.
        columns = [np.ascontiguousarray(np.swapaxes(array[segments, :, envs], 0, 1)) for array in self._arrays[1:]]
        return TrajectorySegment(self._sample_observations(segments, envs), *columns)

    def _sample_observations(self, segments: np.ndarray, envs: np.ndarray) -> np.ndarray:
        """``(n_steps + 1, n_envs, *observation_shape)`` observations of env ``i`` of segment ``segments[i]``."""
        if self.stack_axis is None:
            return np.ascontiguousarray(np.swapaxes(self.observations[segments, :, envs], 0, 1))
        size, steps = self.stack_size, np.arange(self.n_steps + 1)
        # Observation t is a reset (its stack repeats one frame) when the step before it ended an episode.
        resets = np.concatenate([np.zeros((len(envs), 1), bool), self.dones[segments, :, envs] > 0], axis=1)
        episode_start = np.maximum.accumulate(np.where(resets, steps, 0), axis=1)  # (N, T + 1)
        floor = np.where(episode_start > 0, size - 1 + episode_start, 0)
        # Frame k (oldest first) of observation t sits at t + k, not before its episode's first frame.
        positions = np.maximum(steps[None, :, None] + np.arange(size), floor[:, :, None])  # (N, T + 1, K)
        frames = self.observations[segments[:, None, None], positions, envs[:, None, None]]  # (N, T + 1, K, *frame)
        stacks = np.moveaxis(frames, 2, 2 + self.stack_axis)
        return np.ascontiguousarray(np.swapaxes(stacks, 0, 1))


# Beside a saved array: its shape before its last, repeated rows were left out, and that row.
SHAPE, FILL = '#shape', '#fill'


def _rows_before_repeats(value: np.ndarray, block: int = 4096) -> int:
    """How many leading rows of ``value`` to keep: all but the run of rows at the end equal to the last one.
    Scanned from the end a block at a time, so an Atari frame store needs no array of its size."""
    rows, end = value.reshape(len(value), -1), len(value)
    while end > 0:
        start = max(0, end - block)
        differs = np.flatnonzero((rows[start:end] != rows[-1]).any(axis=1))
        if len(differs):
            return start + int(differs[-1]) + 1
        end = start
    return 0


def buffer_state(buffer) -> dict[str, np.ndarray]:
    """Everything a replay buffer holds and counts, as named arrays (what ``agent.save(include_buffer=True)``
    writes): its arrays and counters, those of its storage and sum tree, and its sampler's state."""
    state = {'rng': np.asarray(json.dumps(buffer.rng.bit_generator.state))}
    for prefix, owner in _stateful_parts(buffer).items():
        for name, value in vars(owner).items():
            if isinstance(value, np.ndarray) and value.ndim and len(value):
                # The rows after the last one that differs from the final row (a buffer's unwritten rows
                # still hold their initial value) are saved as that row and a shape, not as bytes: a buffer
                # that is still filling costs what it holds.
                state[f'{prefix}/{name}'] = value[:_rows_before_repeats(value)]
                state[f'{prefix}/{name}{SHAPE}'] = np.asarray(value.shape)
                state[f'{prefix}/{name}{FILL}'] = value[-1]
            elif isinstance(value, (np.ndarray, int, float, np.integer, np.floating)):
                state[f'{prefix}/{name}'] = np.asarray(value)
    return state


def restore_buffer_state(buffer, state: dict[str, np.ndarray]) -> None:
    """Take back what :func:`buffer_state` gave, into a buffer built with the same settings.

    Raises:
        ValueError: the saved arrays do not fit this buffer (another capacity, env count or space).
    """
    parts = _stateful_parts(buffer)
    fields = {key: (parts[key.partition('/')[0]], key.partition('/')[2], value)
              for key, value in state.items() if key != 'rng' and not key.endswith((SHAPE, FILL))}
    for key, (owner, name, value) in fields.items():  # check everything before changing anything
        current = getattr(owner, name)
        shape = tuple(state[key + SHAPE]) if key + SHAPE in state else value.shape  # older saves: whole arrays
        if isinstance(current, np.ndarray) and (current.shape != shape or current.dtype != value.dtype):
            raise ValueError(f'the saved replay buffer does not fit this one: {name} is {shape} '
                             f'{value.dtype}, expected {current.shape} {current.dtype}')
    for key, (owner, name, value) in fields.items():
        current = getattr(owner, name)
        if isinstance(current, np.ndarray):
            current[:len(value)] = value
            if len(value) < len(current):
                current[len(value):] = state[key + FILL]
        else:
            setattr(owner, name, type(current)(value))
    buffer.rng.bit_generator.state = json.loads(str(state['rng']))


def _stateful_parts(buffer) -> dict[str, object]:
    """The buffer and the objects of this module it holds (frame or observation store, sum tree)."""
    parts = {'buffer': buffer}
    parts.update({name: value for name, value in vars(buffer).items()
                  if type(value).__module__ == __name__ and hasattr(value, '__dict__')})
    return parts
