"""Observing: the observation side of an agent: which spaces it takes, Dict observations packed into the one
vector its models and buffers see (:mod:`xagents.envs.observations`), and the running normalisation of vector
observations (per element, so per key of a Dict; images and one-hot codes are never scaled)."""
from __future__ import annotations

from typing import Any, Mapping

import gymnasium as gym
import numpy as np
from gymnasium.wrappers.utils import RunningMeanStd
import xagents.utils.quiet_keras  # noqa: F401  (first: Keras loads quietly)
from keras import ops

from xagents.envs.creation import one_hot_size
from xagents.networks.models import is_image_space
from xagents.envs.observations import (NUMBERS, DictObservations, ObservationError, check_observation_space,
                                       holds_grid)

Tensor = Any  # a tensor of the Keras backend, or what converts to one


class Observing:
    """The observation part of :class:`xagents.agent.base.BaseAgent`.

    Attributes:
        observation_space: What the agent's models, rollouts and statistics take: the env's Box, or the packed
            ``float32`` vector of a Dict space.
        dict_observations: The packing of a Dict space (None for a Box).
    """

    observation_clip = 10.0  # normalised observations are clipped to +-this (VecNormalize's clip_obs)

    def setup_observations(self, space: gym.Space, normalize_observations: bool | None) -> None:
        """Check the env's observation space and set up its packing and normalisation statistics (by default,
        where the observations hold a grid)."""
        check_observation_space(space, type(self).__name__)
        self.dict_observations = DictObservations.of(space)
        if normalize_observations is None:
            normalize_observations = holds_grid(space)
        self.observation_space = self.dict_observations.space if self.dict_observations else space
        self.observation_stats = None
        self.normalized_mask = None  # the packed entries normalisation scales (Dict observations)
        if normalize_observations:
            if self.dict_observations is not None:
                self.normalized_mask = self.dict_observations.normalized_mask
                if not self.normalized_mask.any():
                    raise ValueError(f'normalize_observations scales vector (Box) keys and small uint8 grids, and '
                                     f'{space} has none (pictures are scaled to [0, 1] in the model, Discrete keys '
                                     'one-hot encoded)')
                self.observation_stats = RunningMeanStd(shape=(int(self.normalized_mask.sum()),))
            elif is_image_space(space):
                raise ValueError(f'normalize_observations scales vector observations, got images shaped {space.shape} '
                                 '(they are scaled to [0, 1] in the model)')
            else:
                self.observation_stats = RunningMeanStd(shape=space.shape)

    def encoded(self, observations, rows: str = 'row') -> np.ndarray:
        """A batch of the env's observations as the agent takes them: Dict ones packed (checked: an
        :class:`~xagents.envs.observations.ObservationError` names the key and its row, ``rows`` saying what one
        is), others as they are."""
        return observations if self.dict_observations is None else self.dict_observations.pack(observations, rows)

    def normalized(self, observations: np.ndarray) -> np.ndarray:
        """Observations as the models see them: scaled by the running statistics (frozen) when enabled."""
        stats = self.observation_stats
        if stats is None:
            return observations
        mask = self.normalized_mask
        values = observations if mask is None else observations[:, mask]
        scaled = np.clip((values - stats.mean) / np.sqrt(stats.var + 1e-8),
                         -self.observation_clip, self.observation_clip).astype(np.float32)
        if mask is None:
            return scaled
        result = np.array(observations, np.float32)
        result[:, mask] = scaled
        return result

    def observe(self, observations: np.ndarray) -> np.ndarray:
        """Observations met while collecting: the running statistics take them in, then they are normalised."""
        if self.observation_stats is not None:
            self.observation_stats.update(observations if self.normalized_mask is None
                                          else observations[:, self.normalized_mask])
        return self.normalized(observations)

    def normalized_graph(self, observations: Tensor) -> Tensor:
        """:meth:`normalized` in graph ops (``keras.ops``, any backend), with the statistics of now as constants."""
        stats = self.observation_stats
        if stats is None:
            return observations
        mean, std = stats.mean.astype(np.float32), np.sqrt(stats.var + 1e-8).astype(np.float32)
        observations = ops.cast(observations, 'float32')
        mask = self.normalized_mask
        if mask is not None:  # scatter the statistics over the packed vector; other entries pass through
            full_mean, full_std = np.zeros(mask.shape, np.float32), np.ones(mask.shape, np.float32)
            full_mean[mask], full_std[mask] = mean, std
            mean, std = full_mean, full_std
        # Constants as tensors: with a NumPy array beside it, a PyTorch tensor is computed on in NumPy, and an
        # export would lose its input.
        scaled = ops.clip((observations - ops.convert_to_tensor(mean)) / ops.convert_to_tensor(std),
                          -self.observation_clip, self.observation_clip)
        return scaled if mask is None else ops.where(ops.convert_to_tensor(mask), scaled, observations)

    def encoded_graph(self, observations: Tensor | Mapping[str, Tensor]) -> Tensor:
        """:meth:`encoded` in graph ops (``keras.ops``, any backend), for exports: a dict of tensors (one per key)
        packed into one ``(B, size)`` float32 tensor, Discrete keys one-hot."""
        keys = self.dict_observations
        if keys is None:
            return observations
        parts = []
        for key in keys.keys:
            values = observations[key.name]
            if key.kind == 'discrete':
                values = ops.reshape(ops.cast(values, 'int32'), (-1, len(key.counts())))
                parts += [ops.one_hot(values[:, entry] - int(start), int(count), dtype='float32')
                          for entry, (count, start) in enumerate(zip(key.counts(), key.starts()))]
            else:
                parts.append(ops.reshape(ops.cast(values, 'float32'), (-1, key.size)))
        return ops.concatenate(parts, -1)

    def observation_batch(self, observation) -> tuple[np.ndarray, bool]:
        """``predict``'s observation as a packed batch, and whether it was one unbatched observation.

        Raises:
            ValueError: the observation has neither the env's observation shape nor a batch of it.
        """
        keys = self.dict_observations
        if keys is not None:
            if isinstance(observation, Mapping):
                spaces = {key.name: key.space for key in keys.keys}
                observation = {name: one_array(value, f'observation[{name!r}]', spaces[name]) if name in spaces
                               else value for name, value in observation.items()}
            _, single = keys.batch_size(observation)
            batch = {name: np.asarray(value)[None] if single else np.asarray(value) for name, value in observation.items()}
            return keys.pack(batch), single
        space = self.observation_space
        observations, states = one_array(observation, 'observations', space), one_hot_size(space)
        if states and np.issubdtype(observations.dtype, np.integer) and observations.ndim <= 1:
            outside = (observations < 0) | (observations >= states)
            if np.any(outside):
                raise ObservationError(f'expected Discrete({states}) states from 0 to {states - 1} (one-hot encoded '
                                       f'as in training), got {observations[outside].ravel()[0]}')
            observations = np.eye(states, dtype=space.dtype)[observations]  # Discrete states, one-hot as in training
        if observations.dtype.kind not in NUMBERS:
            raise ObservationError(f'expected observations of numbers shaped {space.shape}, got an array of '
                                   f'{observations.dtype}')
        observations = observations.astype(space.dtype, copy=False)
        single = observations.shape == space.shape
        if not single and observations.shape[1:] != space.shape:
            raise ValueError(f'expected an observation shaped {space.shape} or a batch shaped (n, '
                             f'{", ".join(map(str, space.shape))}), got shape {observations.shape}')
        return (observations[None] if single else observations), single


def one_array(value: Any, what: str, space: gym.Space) -> np.ndarray:
    """``value`` as one array; a ragged nesting of lists (rows of different lengths) is refused in one line, with
    the observations ``space`` takes."""
    try:
        return np.asarray(value)
    except ValueError:  # NumPy's "inhomogeneous shape"
        expected = f'shaped {space.shape}' if isinstance(space, gym.spaces.Box) else f'of {space}'
        raise ObservationError(f'expected {what} of numbers {expected} (or a batch of them), got nested sequences of '
                               'different lengths') from None
