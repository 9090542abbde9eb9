"""NumPy storage for experience: on-policy rollouts and off-policy replay.

Nothing here imports TensorFlow: buffers fill and sample NumPy arrays, agents turn
batches into tensors at the graph boundary.
"""
from __future__ import annotations

import logging
from typing import NamedTuple

import gymnasium as gym
import numpy as np

from xagents.envs.observations import DictObservations

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
        self.action_masks: np.ndarray | None = None  # (n_steps, n_envs, n) booleans, once an env gives masks
        self.episode_starts: np.ndarray | None = None  # (n_steps, n_envs) of a recurrent policy: 1 where a step
        self.states: np.ndarray | None = None  # begins an episode; (n_steps, n_envs, S) its state before each step

    def keep_memory(self, size: int) -> None:
        """Store a recurrent policy's episode starts and states (``size`` floats per env) at every step."""
        self.episode_starts = np.zeros((self.n_steps, self.n_envs), np.float32)
        self.states = np.zeros((self.n_steps, self.n_envs, size), np.float32)

    def store_memory(self, t: int, memory) -> None:
        """Keep the :class:`~xagents.networks.recurrence.Memory` step ``t`` was acted from (None: no recurrence)."""
        if memory is not None:
            self.episode_starts[t] = memory.starts
            self.states[t] = memory.state

    def store_masks(self, t: int, masks: np.ndarray | None) -> None:
        """Keep the action masks ``(n_envs, n)`` the actions of step ``t`` were drawn within (None: the envs
        gave none); the update uses them again in every epoch."""
        if masks is None:
            self.action_masks = None
            return
        if self.action_masks is None:
            self.action_masks = np.ones((self.n_steps, *masks.shape), bool)
        self.action_masks[t] = masks

    def filled(self, last_values: np.ndarray) -> Rollout:
        """The collected rollout, with the values ``(n_envs,)`` of the observations after it."""
        return Rollout(self.observations, self.actions, self.rewards, self.dones, self.values, self.log_probs,
                       last_values, self.action_masks, self.episode_starts, self.states)


class Rollout(NamedTuple):
    """One on-policy rollout: ``(n_steps, n_envs, ...)`` arrays (see :class:`RolloutBuffer`),
    ``last_values`` ``(n_envs,)``, the values GAE bootstraps from, and the action masks if any."""

    observations: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    dones: np.ndarray
    values: np.ndarray
    log_probs: np.ndarray
    last_values: np.ndarray
    action_masks: np.ndarray | None = None  # (n_steps, n_envs, n) booleans when the envs give masks
    episode_starts: np.ndarray | None = None  # (n_steps, n_envs) of a recurrent policy
    states: np.ndarray | None = None  # (n_steps, n_envs, S) of a recurrent policy


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
MAX_REDRAWS = 32  # rejection rounds before sampling falls back to scanning every slot


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
        action_masks: ``(batch, n)`` bool, the actions allowed in ``observations`` (None: no masks stored).
        next_action_masks: ``(batch, n)`` bool, those allowed in ``next_observations``, what the target's
            maximum or expectation runs over.
    """

    observations: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    next_observations: np.ndarray
    discounts: np.ndarray
    weights: np.ndarray
    indices: np.ndarray
    action_masks: np.ndarray | None = None
    next_action_masks: np.ndarray | None = None


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


class DictStore:
    """Dict observations, every key in an array of its own, in its own dtype (an image key as uint8, and one
    frame per slot when frames are stacked); written and read as the agent's packed vectors. The replay buffer's
    store, and ACER's segment buffer's (a row per step)."""

    def __init__(self, rows: int, n_envs: int, keys: DictObservations, axis: int | None) -> None:
        self.keys = keys
        self.parts = {key.name: _FrameStore(rows, n_envs, key.space, stack_axis(key.space, axis))
                      if axis is not None and key.kind in ('image', 'grid') else _ObservationStore(rows, n_envs, key.space)
                      for key in keys.keys}
        sizes = {part.stack_size for part in self.parts.values() if isinstance(part, _FrameStore)}
        if len(sizes) > 1:
            raise ValueError(f'expected every image key stacked alike, got stacks of {sorted(sizes)} frames')
        self.stack_size = sizes.pop() if sizes else 1

    @property
    def nbytes(self) -> int:
        return sum(part.nbytes for part in self.parts.values())

    def write(self, rows: np.ndarray, envs: np.ndarray, observations: np.ndarray) -> None:
        for name, values in self.keys.unpack(observations).items():
            self.parts[name].write(rows, envs, values)

    def read(self, frame_rows: np.ndarray, envs: np.ndarray) -> np.ndarray:
        return self.keys.pack({name: part.read(frame_rows, envs) for name, part in self.parts.items()})

    def is_self_contained(self, observations: np.ndarray) -> np.ndarray:
        unpacked = self.keys.unpack(observations)
        contained = np.ones(len(observations), bool)
        for name, part in self.parts.items():
            contained &= part.is_self_contained(unpacked[name])
        return contained


def stack_axis(space: gym.Space, axis: int) -> int:
    """``axis`` of frame-stack observations as a non-negative index, checked against their shape."""
    ndim = len(space.shape)
    if not -ndim <= axis < ndim or ndim < 2:
        raise ValueError(f'expected frame_stack_axis in [-{ndim}, {ndim}) of observations with at least '
                         f'2 dimensions, got {axis!r} for shape {space.shape}')
    return axis % ndim


def check_space(space: gym.Space, name: str) -> None:
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
                ``(K, ...)``) to store each frame once (of the image keys of Dict observations).

        On a Dict observation space every key is stored apart in its own dtype, and ``add`` and ``sample``
        take and give the packed vectors agents work on (:class:`xagents.envs.observations.DictObservations`).
        """
        if not isinstance(observation_space, gym.spaces.Dict):
            check_space(observation_space, 'an observation space')
        check_space(action_space, 'an action space')
        if not isinstance(n_envs, (int, np.integer)) or n_envs < 1:
            raise ValueError(f'expected n_envs >= 1, got {n_envs!r}')
        if not isinstance(capacity, (int, np.integer)) or capacity < n_envs:
            raise ValueError(f'expected capacity >= n_envs = {n_envs}, got {capacity!r}')
        if not isinstance(n_steps, (int, np.integer)) or n_steps < 1:
            raise ValueError(f'expected n_steps >= 1, got {n_steps!r}')
        if not 0.0 <= gamma <= 1.0:
            raise ValueError(f'expected 0 <= gamma <= 1, got {gamma!r}')
        rows = capacity // n_envs + 1  # + 1: the slot after the newest transition
        keys = DictObservations.of(observation_space)
        if keys is not None:
            self._store = DictStore(rows, n_envs, keys, frame_stack_axis)
            observation_space = keys.space
        elif frame_stack_axis is None:
            self._store = _ObservationStore(rows, n_envs, observation_space)
        else:
            self._store = _FrameStore(rows, n_envs, observation_space, stack_axis(observation_space, frame_stack_axis))
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
        self._masks: np.ndarray | None = None  # (rows, n_envs, n) allowed actions of each slot's observation
        self._size = 0
        self.steps = 0  # transitions added, over all envs

    def __len__(self) -> int:
        """Number of stored transitions (some may not be sampleable yet, see the class doc)."""
        return self._size

    @property
    def nbytes(self) -> int:
        """Bytes held by the storage arrays."""
        arrays = (self._actions, self._rewards, self._terminated, self._truncated, self._starts,
                  self._kinds, self._stamps) + (() if self._masks is None else (self._masks,))
        return self._store.nbytes + sum(a.nbytes for a in arrays)

    @property
    def bytes_per_transition(self) -> float:
        """``nbytes / capacity``: storage cost of one transition."""
        return self.nbytes / self.capacity

    def add(self, observations: np.ndarray, actions: np.ndarray, rewards: np.ndarray,
            next_observations: np.ndarray, terminated: np.ndarray, truncated: np.ndarray,
            columns: slice | None = None, action_masks: np.ndarray | None = None,
            next_action_masks: np.ndarray | None = None) -> None:
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
            action_masks: ``(n_envs, n)`` the actions the env allowed in ``observations``, if it says; the
                first masks given allocate their storage for the whole capacity (one byte per action and slot).
            next_action_masks: ``(n_envs, n)`` those allowed in ``next_observations`` (in the final
                observation where the episode ended): what a target bootstraps over.
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
        self._store_masks(rows, next_rows, envs, action_masks, next_action_masks)
        self._stamps[rows, envs] = positions
        self._stamps[next_rows, envs] = positions + 1
        self._positions[envs] = positions + 1 + done  # an ended episode keeps its final observation's slot
        self._episode_ended[envs] = done
        self._size += n - overwritten
        self.steps += n

    lazy_arrays = ('_masks',)  # allocated by the first add that needs them (and by a restore that holds them)

    def _store_masks(self, rows: np.ndarray, next_rows: np.ndarray, envs: np.ndarray,
                     masks: np.ndarray | None, next_masks: np.ndarray | None) -> None:
        """Keep the action masks of a vector step's observations and next observations, slot by slot as the
        observations are kept; where an add brings none (after some did), every action is allowed."""
        if masks is None and self._masks is None:
            return
        if masks is None or next_masks is None:
            masks = next_masks = True
        else:
            size = np.shape(masks)[-1]
            masks = self._check_array('action_masks', masks, (len(envs), size)).astype(bool)
            next_masks = self._check_array('next_action_masks', next_masks, (len(envs), size)).astype(bool)
            if self._masks is None:
                self._masks = np.ones((self._rows, self.n_envs, size), bool)
        self._masks[rows, envs] = masks
        self._masks[next_rows, envs] = next_masks

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

    def can_sample(self) -> bool:
        """Whether :meth:`sample` has transitions to draw from: anything stored (hindsight replay waits for an
        episode to end)."""
        return self._size > 0

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
        for _ in range(MAX_REDRAWS):
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
            indices=indices.astype(np.int64),
            action_masks=None if self._masks is None else self._masks[rows, envs],
            next_action_masks=None if self._masks is None else self._masks[window.next_rows[:, -1], envs])
