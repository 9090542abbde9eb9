"""ACER's replay: whole trajectory segments of every env, with the policy that acted."""
from __future__ import annotations

import logging
from typing import NamedTuple

import gymnasium as gym
import numpy as np

from xagents.replay.buffers import DictStore, check_space, stack_axis
from xagents.envs.observations import DictObservations

logger = logging.getLogger(__name__)


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

    lazy_arrays = ()  # (every array is allocated up front)

    def __init__(self, capacity: int, n_steps: int, n_envs: int, observation_space: gym.Space,
                 action_space: gym.spaces.Discrete, seed: int | np.random.Generator | None = None,
                 frame_stack_axis: int | None = None, keys: DictObservations | None = None) -> None:
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
            keys: For Dict observations (``observation_space`` their packed vectors), how they pack: each key
                is then stored in an array of its own, in its own dtype (an image as uint8, not float32).
        """
        check_space(observation_space, 'an observation space')
        if not isinstance(action_space, gym.spaces.Discrete):
            raise ValueError(f'expected a Discrete action space, got {action_space!r}')
        for name, value in (('capacity', capacity), ('n_steps', n_steps), ('n_envs', n_envs)):
            if not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f'expected {name} >= 1, got {value!r}')
        self.capacity, self.n_steps, self.n_envs = capacity, n_steps, n_envs
        self.observation_shape = observation_space.shape
        self.rng = np.random.default_rng(seed)
        shape = (capacity, n_steps, n_envs)
        self.observation_store = None
        if keys is not None:
            if frame_stack_axis is not None:
                raise ValueError('expected frame_stack_axis None with Dict observations (stored key by key)')
            self.stack_axis, self.observations = None, None
            self.observation_store = DictStore(capacity * (n_steps + 1), n_envs, keys, None)  # a row per step
        elif frame_stack_axis is None:
            self.stack_axis = None
            self.observations = np.zeros((capacity, n_steps + 1, n_envs) + observation_space.shape,
                                         observation_space.dtype)
        else:
            self.stack_axis = stack_axis(observation_space, frame_stack_axis)
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
        self._arrays = (self.actions, self.rewards, self.dones, self.policies)
        self._next, self._size = 0, 0

    def __len__(self) -> int:
        """Number of stored segments."""
        return self._size

    @property
    def nbytes(self) -> int:
        """Bytes held by the storage arrays."""
        observations = self.observations if self.observation_store is None else self.observation_store
        return observations.nbytes + sum(array.nbytes for array in self._arrays)

    def add(self, segment: TrajectorySegment) -> None:
        """Store a segment, overwriting the oldest one when the buffer is full."""
        expected = (self.n_steps + 1, self.n_envs) + self.observation_shape
        if np.shape(segment.observations) != expected:
            raise ValueError(f'expected observations of shape {expected}, got {np.shape(segment.observations)}')
        for name, array, value in zip(TrajectorySegment._fields[1:], self._arrays, segment[1:]):
            if np.shape(value) != array.shape[1:]:
                raise ValueError(f'expected {name} of shape {array.shape[1:]}, got {np.shape(value)}')
            array[self._next] = value
        if self.observation_store is not None:
            rows, envs = self._rows(np.full(self.n_envs, self._next))
            self.observation_store.write(rows, envs, segment.observations.reshape(len(rows), -1))
        elif self.stack_axis is None:
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
        columns = [np.ascontiguousarray(np.swapaxes(array[segments, :, envs], 0, 1)) for array in self._arrays]
        return TrajectorySegment(self._sample_observations(segments, envs), *columns)

    def _sample_observations(self, segments: np.ndarray, envs: np.ndarray) -> np.ndarray:
        """``(n_steps + 1, n_envs, *observation_shape)`` observations of env ``i`` of segment ``segments[i]``."""
        if self.observation_store is not None:
            rows, columns = self._rows(segments)
            packed = self.observation_store.read(rows[:, None], columns)
            return packed.reshape(self.n_steps + 1, self.n_envs, -1)
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

    def _rows(self, segments: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Rows and env columns in the Dict store of step ``t`` of env ``i`` in segment ``segments[i]``, flat in
        ``(t, i)`` order: ``(n_steps + 1) * n_envs`` of each."""
        steps = np.arange(self.n_steps + 1)[:, None]
        rows = segments[None, :] * (self.n_steps + 1) + steps
        return rows.ravel(), np.broadcast_to(np.arange(self.n_envs), rows.shape).ravel()
