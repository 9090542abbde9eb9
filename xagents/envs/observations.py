"""Dict observations: which spaces agents take, and how a Dict of them travels inside an agent.

An agent on a ``Dict`` observation space (one level, as Stable-Baselines3's ``MultiInputPolicy``) works on one
packed ``float32`` vector per observation: every key flattened in the space's key order, ``Discrete`` keys
one-hot (``MultiDiscrete`` one-hot per entry), images as their raw values. Rollouts, acting, the
updates and the observation statistics see that vector; the models split it again into one input per key
(:func:`xagents.networks.models.build_model`); the replay buffer stores every key apart in its own dtype
(:class:`xagents.replay.buffers.ReplayBuffer` on a Dict space); ``predict``, evaluation, play and the exports
take the env's dicts. Nothing here imports TensorFlow.
"""
from __future__ import annotations

import dataclasses
from typing import Iterable, Mapping

import gymnasium as gym
import numpy as np

from xagents.envs.masks import INFO_SOURCE, MASK_KEY, as_mask, mask_size
from xagents.envs.spaces import empty_dimension, one_line

KEY_SPACES = (gym.spaces.Box, gym.spaces.Discrete, gym.spaces.MultiBinary, gym.spaces.MultiDiscrete)


def is_image(space: gym.Space) -> bool:
    """Whether a Box holds images: uint8 in [0, 255], height x width x channels (Stable-Baselines3's test)."""
    return (isinstance(space, gym.spaces.Box) and len(space.shape) == 3 and space.dtype == np.uint8
            and bool(np.all(space.low == 0)) and bool(np.all(space.high == 255)))


NATURE_CNN_SMALLEST = 36  # the least height and width the Nature CNN's layers fit (8 stride 4, 4 stride 2, 3)


def is_pixels(space: gym.Space) -> bool:
    """Whether a Box holds pictures: images (:func:`is_image`) at least 36 pixels high and wide, which get the
    Nature CNN and enter scaled to [0, 1]. A smaller one is a grid (:func:`is_grid`) unless :class:`SmallPictures`
    reads it as a picture."""
    return is_image(space) and min(space.shape[:2]) >= NATURE_CNN_SMALLEST


def is_grid(space: gym.Space) -> bool:
    """Whether a Box holds grids of ids, which enter flattened with their values as they are and are normalised
    (``normalize_observations``, on by default for them): uint8 height x width x channels from 0 that either declares
    its true maximum below 255 (``Box(0, 10, (7, 7, 3), np.uint8)``: a grid at any size), or declares 255 and is too
    small for the Nature CNN (MiniGrid's 7x7 ids, declared ``Box(0, 255)``). With PPO's defaults at 50,000 steps
    (benchmarks/small_images.py, 5 seeds) a 16x16 camera read as a grid still learns, more slowly (6.6 of 10 against
    7.9 as a picture), while MiniGrid's ids read as pictures do not learn at all (0.00 against 0.93): so small images
    are grids unless :class:`SmallPictures` reads them as pictures."""
    return (isinstance(space, gym.spaces.Box) and len(space.shape) == 3 and space.dtype == np.uint8
            and bool(np.all(space.low == 0)) and (bool(np.all(space.high < 255)) or is_image(space)
                                                  and not is_pixels(space)))


def holds_grid(space: gym.Space) -> bool:
    """Whether observations of ``space`` are, or hold under a Dict key, a grid (:func:`is_grid`), which is
    normalised by default."""
    spaces = space.spaces.values() if isinstance(space, gym.spaces.Dict) else [space]
    return any(is_grid(sub) for sub in spaces)


class SmallPictures(gym.ObservationWrapper):
    """Read uint8 images too small for the Nature CNN (under Dict keys too) as pictures, not grids: as float32
    intensities in [0, 1], which agents flatten and do not normalise by default (the reading of small pictures,
    such as a 16x16 camera, before grids). ``wrapper=SmallPictures``, on the command line
    ``--wrapper xagents.envs.observations:SmallPictures``; ``--model`` cfgs can then give them their own layers."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        space = env.observation_space
        subs = space.spaces if isinstance(space, gym.spaces.Dict) else {None: space}
        self.keys = [key for key, sub in subs.items() if is_image(sub) and not is_pixels(sub)]
        if not self.keys:
            raise ValueError(f'SmallPictures reads uint8 images in [0, 255] smaller than {NATURE_CNN_SMALLEST} x '
                             f'{NATURE_CNN_SMALLEST} as pictures, and {one_line(space)} holds none')
        scaled = {key: gym.spaces.Box(0.0, 1.0, subs[key].shape, np.float32) for key in self.keys}
        self.observation_space = gym.spaces.Dict({**space.spaces, **scaled}) if isinstance(
            space, gym.spaces.Dict) else scaled[None]

    def observation(self, observation):
        if not isinstance(observation, Mapping):
            return np.asarray(observation, np.float32) / np.float32(255)
        return {**observation, **{key: np.asarray(observation[key], np.float32) / np.float32(255) for key in self.keys}}


def channels_first(space: gym.Space, owner: str, where: str = '') -> str | None:
    """Why ``owner`` refuses uint8 images laid out channels first (``(C, H, W)``: the first axis the smallest, as
    Stable-Baselines3 tells them), or None: agents take images height x width x channels."""
    shape = getattr(space, 'shape', None) or ()
    if not is_image(space) or shape[0] >= min(shape[1:]):
        return None
    return (f'{owner} expects images channels-last (height x width x channels), got uint8 images{where} shaped '
            f'{shape}, channels first: transpose them with a wrapper, gymnasium.wrappers.TransformObservation(env, '
            f'lambda obs: np.moveaxis(obs, 0, -1), Box(0, 255, {(*shape[1:], shape[0])}, np.uint8))')


def check_observation_space(space: gym.Space, owner: str) -> None:
    """Refuse, in one line, an observation space no agent takes: anything but a Box or a one-level Dict of
    Box, Discrete, MultiBinary and MultiDiscrete spaces (a Discrete space is one-hot encoded by create_envs), and
    images laid out channels first."""
    if isinstance(space, gym.spaces.Box):
        if channels_first(space, owner):
            raise ValueError(channels_first(space, owner))
        if empty_dimension(space):
            raise ValueError(f'{owner} cannot take these observations: {empty_dimension(space)}')
        return
    if not isinstance(space, gym.spaces.Dict):
        raise ValueError(f'{owner} expects Box or Dict observations (envs made by create_envs one-hot encode '
                         f'Discrete ones), got {space}')
    if not space.spaces:
        raise ValueError(f'{owner} expects a Dict observation space with at least one key, got {space}')
    for key, sub in space.spaces.items():
        if isinstance(sub, (gym.spaces.Dict, gym.spaces.Tuple)):
            raise ValueError(f'{owner} expects a Dict observation space of one level, got a nested '
                             f'{type(sub).__name__} under {key!r}: flatten it (gymnasium.wrappers.FlattenObservation '
                             f'on that part) or give each part its own key')
        if not isinstance(sub, KEY_SPACES):
            raise ValueError(f'{owner} encodes Box, Discrete, MultiBinary and MultiDiscrete keys of a Dict '
                             f'observation, got {type(sub).__name__} under {key!r}: drop it with '
                             f'observation_keys (--observation-keys) or gymnasium.wrappers.FilterObservation')
        if channels_first(sub, owner, f' under {key!r}'):
            raise ValueError(channels_first(sub, owner, f' under {key!r}'))
        if empty_dimension(sub):
            raise ValueError(f'{owner} cannot encode key {key!r} of the observations: {empty_dimension(sub)} (drop it '
                             f'with observation_keys, --observation-keys)')


class ObservationError(ValueError):
    """An observation that does not fit its space: another shape, text or objects for numbers, a Discrete value
    out of range. Raised where observations enter; a run reports an env's as an
    :class:`~xagents.envs.creation.EnvError` naming the call and the env step."""


NUMBERS = 'biuf'  # dtype kinds an observation may hold: booleans, integers, floats


def observation_problem(value, space: gym.Space, what: str = 'an observation') -> str | None:
    """What is wrong with one env's observation ``value`` of ``space`` (``what`` names it in the answer), or None:
    a shape other than the space's, text or objects where numbers go, a Discrete or MultiDiscrete value out of
    range or not an integer, a Dict without one of its keys. Bounds of a Box are not checked (agents clip or
    scale), nor keys of spaces no agent reads (Text). A float32 array of the right shape costs two comparisons."""
    if isinstance(space, gym.spaces.Dict):
        if not isinstance(value, Mapping):
            return f'{what} of {_kind_of(value)}: expected a dict with keys {", ".join(map(str, space.spaces))}'
        for key, sub in space.spaces.items():
            if key not in value:
                return f'{what} without key {key!r}: expected keys {", ".join(map(str, space.spaces))}'
            problem = observation_problem(value[key], sub, f'observation[{key!r}]')
            if problem:
                return problem
        return None
    if not isinstance(space, KEY_SPACES):
        return None
    if type(value) is np.ndarray and value.shape == space.shape and value.dtype.kind in NUMBERS and not isinstance(
            space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete)):
        return None  # the common case, at once
    try:
        array = np.asarray(value)
    except (ValueError, TypeError):
        return f'{what} of {_kind_of(value)} that is no array: expected numbers shaped {space.shape}'
    if array.dtype.kind not in NUMBERS:
        return f'{what} of {_dtype_words(array)}: expected numbers shaped {space.shape} ({space.dtype})'
    if array.shape != space.shape:
        return f'{what} shaped {array.shape}: expected {space.shape}, the observation space\'s shape'
    if isinstance(space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete)):
        return _out_of_range(array.reshape(1, -1), space, 'observation' if what == 'an observation' else what)
    return None


def _kind_of(value) -> str:
    return f'{type(value).__name__} {_short(value)}'


def _short(value) -> str:
    text = repr(value.item() if isinstance(value, np.generic) else value)
    return text if len(text) <= 40 else text[:37] + '...'


def _dtype_words(array: np.ndarray) -> str:
    """``array``'s dtype in words, with its first entry that is no number: ``text (<U1, 'a')``."""
    words = {'U': 'text', 'S': 'bytes', 'O': 'objects', 'c': 'complex numbers'}.get(array.dtype.kind, 'values')
    flat = array.reshape(-1)
    first = next((value for value in flat if not isinstance(value, (int, float, np.number))), None) if (
        array.dtype == object) else (flat[0] if flat.size else None)
    return f'{words} ({array.dtype}{"" if first is None and array.dtype != object else ", " + _short(first)})'


def _out_of_range(values: np.ndarray, space: gym.Space, what: str, rows: str = '') -> str | None:
    """What is wrong with ``(n, k)`` values of a Discrete (k = 1) or MultiDiscrete space, or None: each must be an
    integer within its entry's range (floats holding integers pass)."""
    if isinstance(space, gym.spaces.Discrete):
        counts, starts = np.asarray([space.n]), np.asarray([space.start])
    else:
        counts, starts = np.asarray(space.nvec).ravel(), np.asarray(space.start).ravel()
    kind = values.dtype.kind
    if kind not in NUMBERS:
        return f'{what} of {_dtype_words(values)}: expected integers of {one_line(space)}'
    wrong = np.zeros(values.shape, bool)
    if kind == 'f':
        wrong |= ~np.isfinite(values) | (values != np.round(values))
    numbers = np.where(wrong, starts, values)
    wrong |= (numbers < starts) | (numbers >= starts + counts)
    if not wrong.any():
        return None
    row, entry = (int(i) for i in np.argwhere(wrong)[0])
    where = f' (entry {entry})' if values.shape[1] > 1 else ''
    at = f' in {rows} {row}' if rows else ''
    value = values[row, entry]
    value = value.item() if isinstance(value, np.generic) else value
    low, high = int(starts[entry]), int(starts[entry] + counts[entry] - 1)
    return f'{what} = {value!r}{where}{at}: expected an integer from {low} to {high} ({one_line(space)})'


class CheckedEnvData(gym.Wrapper):
    """Check what an env's ``reset`` and ``step`` return where it enters, before a vector env stacks it: each
    observation against the observation space (:func:`observation_problem`: a wrong shape, text or objects, a
    Discrete state out of range, in one :class:`ObservationError` naming the call and both shapes, not NumPy's
    words), and ``info['action_mask']`` (:func:`~xagents.envs.masks.as_mask`: booleans or 0/1, one per action,
    not NaN or text that stacking beside another env's booleans would cast to True). A float array of the right
    shape and a boolean mask cost a few comparisons."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        empty = empty_dimension(env.action_space)
        if empty:  # refused before a vector env batches the space in NumPy's or Box's words
            raise ValueError(f'no agent can act in this action space: {empty}')
        space = env.observation_space
        self.fast_shape = space.shape if isinstance(space, (gym.spaces.Box, gym.spaces.MultiBinary)) else None
        size = mask_size(env.action_space)
        self.mask_shape = None if size is None else (size,)

    def reset(self, **kwargs):
        observation, info = self.env.reset(**kwargs)
        return observation, self._checked(observation, info, 'reset')

    def step(self, action):
        result = self.env.step(action)
        info = self._checked(result[0], result[4], 'step')
        return result if info is result[4] else (*result[:4], info)

    def _checked(self, observation, info: dict, call: str) -> dict:
        """``info`` with its action mask as booleans, once ``observation`` and the mask passed their checks."""
        if not (type(observation) is np.ndarray and observation.shape == self.fast_shape
                and observation.dtype.kind in NUMBERS):
            problem = observation_problem(observation, self.env.observation_space)
            if problem:
                raise ObservationError(f'{call} returned {problem}')
        if self.mask_shape is None or not isinstance(info, dict) or MASK_KEY not in info:
            return info
        masks = info[MASK_KEY]
        checked = as_mask(masks, self.mask_shape, f'{INFO_SOURCE} in {call}')
        return info if checked is masks else {**info, MASK_KEY: checked}


@dataclasses.dataclass(frozen=True)
class Key:
    """Where one key of a Dict observation lives in the packed vector, and how it is encoded there."""

    name: str
    space: gym.Space
    kind: str  # 'image' (pictures), 'grid' (is_grid), 'vector' (other Box, MultiBinary) or 'discrete'
    offset: int
    size: int

    @property
    def shape(self) -> tuple[int, ...]:
        """The key's shape inside the model: the image or Box shape, else a vector of ``size``."""
        return tuple(self.space.shape) if self.kind in ('image', 'grid') or (
            self.kind == 'vector' and isinstance(self.space, gym.spaces.Box)) else (self.size,)

    def counts(self) -> np.ndarray:
        """The number of categories of each entry of a discrete key (one for Discrete)."""
        space = self.space
        return np.asarray([space.n]) if isinstance(space, gym.spaces.Discrete) else np.asarray(space.nvec).ravel()

    def starts(self) -> np.ndarray:
        space = self.space
        return np.asarray([space.start]) if isinstance(space, gym.spaces.Discrete) else np.asarray(
            getattr(space, 'start', np.zeros_like(space.nvec))).ravel()


class DictObservations:
    """Packs a batch of Dict observations into one ``float32`` vector each, and back.

    Args:
        items: ``(key, space)`` pairs in packing order (a Dict space's ``spaces.items()``).
    """

    def __init__(self, items: Iterable[tuple[str, gym.Space]]) -> None:
        self.keys: list[Key] = []
        offset = 0
        for name, space in items:
            if is_grid(space) or is_image(space):  # grids of ids (small or declaring their maximum), or pictures
                kind, size = 'grid' if is_grid(space) else 'image', int(np.prod(space.shape))
            elif isinstance(space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete)):
                kind = 'discrete'
                size = int(space.n) if isinstance(space, gym.spaces.Discrete) else int(np.sum(space.nvec))
            else:
                kind, size = 'vector', int(np.prod(space.shape))
            self.keys.append(Key(name, space, kind, offset, size))
            offset += size
        self.size = offset
        lows, highs = [], []
        for key in self.keys:
            if isinstance(key.space, gym.spaces.Box):
                lows.append(np.asarray(key.space.low, np.float32).ravel())
                highs.append(np.asarray(key.space.high, np.float32).ravel())
            else:
                lows.append(np.zeros(key.size, np.float32))
                highs.append(np.ones(key.size, np.float32))
        self.space = gym.spaces.Box(np.concatenate(lows), np.concatenate(highs), dtype=np.float32)
        # What observation normalisation scales: vector Box keys and grids (pictures and one-hot codes never).
        self.normalized_mask = np.zeros(self.size, bool)
        for key in self.keys:
            if key.kind == 'grid' or key.kind == 'vector' and isinstance(key.space, gym.spaces.Box):
                self.normalized_mask[key.offset:key.offset + key.size] = True

    @classmethod
    def of(cls, space: gym.Space) -> DictObservations | None:
        """The packing of a Dict space, or None for any other space."""
        return cls(space.spaces.items()) if isinstance(space, gym.spaces.Dict) else None

    @property
    def names(self) -> list[str]:
        return [key.name for key in self.keys]

    def batch_size(self, observations: Mapping[str, np.ndarray]) -> tuple[int, bool]:
        """``(n, single)``: how many observations ``observations`` holds, and whether it is one unbatched one.

        Raises:
            ValueError: a key is missing or unknown, or its shape is neither the space's nor a batch of it.
        """
        if not isinstance(observations, Mapping):
            raise ValueError(f'expected a dict of arrays with keys {self.names}, got {type(observations).__name__}')
        unknown = sorted(set(observations) - set(self.names))
        missing = [name for name in self.names if name not in observations]
        if missing or unknown:
            raise ValueError(f'expected a dict of arrays with keys {self.names}, got keys {sorted(observations)}')
        sizes = set()
        for key in self.keys:
            shape = np.shape(observations[key.name])
            space = tuple(key.space.shape)
            if shape == space:
                sizes.add(None)
            elif shape[1:] == space and len(shape) == len(space) + 1:
                sizes.add(shape[0])
            else:
                batch = ', '.join(map(str, ('n', *space)))
                raise ValueError(f'expected observation {key.name!r} shaped {space} or a batch shaped ({batch}), '
                                 f'got shape {shape}')
        if len(sizes) != 1:
            raise ValueError(f'expected every key of the observation batched alike (all one observation or all '
                             f'n of them), got {", ".join(f"{key.name}: {np.shape(observations[key.name])}" for key in self.keys)}')
        (size,) = sizes
        return (1, True) if size is None else (size, False)

    def pack(self, observations: Mapping[str, np.ndarray], rows: str = 'row') -> np.ndarray:
        """A batch of Dict observations (each key ``(n, *shape)``) as one ``(n, size)`` float32 array.

        Raises:
            ObservationError: a key of another shape, of text or objects, or a Discrete (MultiDiscrete) value out
                of its range or no integer; the message names the key, the value, its row (``rows`` says what a
                row is: an env) and the space.
        """
        first = np.asarray(observations[self.keys[0].name])
        n = len(first)
        packed = np.empty((n, self.size), np.float32)
        for key in self.keys:
            values = np.asarray(observations[key.name])
            name = f'observation[{key.name!r}]'
            if values.shape != (n, *key.space.shape):
                raise ObservationError(f'{name} shaped {values.shape}: expected {(n, *key.space.shape)}, a batch of '
                                       f'{one_line(key.space)}')
            if values.dtype.kind not in NUMBERS:
                raise ObservationError(f'{name} of {_dtype_words(values)}: expected numbers of {one_line(key.space)}')
            part = packed[:, key.offset:key.offset + key.size]
            if key.kind == 'discrete':
                problem = _out_of_range(values.reshape(n, -1), key.space, name, rows)
                if problem:
                    raise ObservationError(problem)
                part[:] = 0
                column = 0
                for entry, (count, start) in enumerate(zip(key.counts(), key.starts())):
                    index = values.reshape(n, -1)[:, entry].astype(np.int64) - start
                    part[np.arange(n), column + index] = 1
                    column += count
            else:
                part[:] = values.reshape(n, -1)
        return packed

    def unpack(self, packed: np.ndarray) -> dict[str, np.ndarray]:
        """The Dict observations of a packed ``(n, size)`` batch, each key in its space's dtype and shape."""
        n = len(packed)
        result = {}
        for key in self.keys:
            part = packed[:, key.offset:key.offset + key.size]
            if key.kind == 'discrete':
                entries, column = [], 0
                for count, start in zip(key.counts(), key.starts()):
                    entries.append(np.argmax(part[:, column:column + count], axis=1) + start)
                    column += count
                values = np.stack(entries, 1).reshape((n, *key.space.shape))
            else:
                values = part.reshape((n, *key.space.shape))
            result[key.name] = values.astype(key.space.dtype)
        return result
