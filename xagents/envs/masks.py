"""Action masks: which actions an env allows in each state, and the maths that keeps agents to them.

An env offers masks in one of two ways: SB3-contrib's ``env.action_masks()`` (a boolean array, one entry
per action) or Gymnasium's ``info['action_mask']`` (Taxi: an int8 array of 6), given with every reset and
step. Envs made by :func:`xagents.envs.creation.create_envs` always give them the second way
(:class:`ActionMaskInfo` moves ``action_masks()`` into the infos), so a subprocess env sends its masks with
its step results and no extra round trip; other vector envs are asked with ``envs.call('action_masks')``.
Under ``SAME_STEP`` autoreset the mask that comes with a step is the next observation's (the reset one's
where an episode ended); the final observation's is in ``info['final_info']``.

A mask is ``(batch, n)`` booleans for ``Discrete(n)``; for ``MultiDiscrete(nvec)`` it is the choices' masks
concatenated (``sum(nvec)`` entries), as SB3-contrib flattens them, and :func:`masked_logits` applies it to
their concatenated logits the same way: each choice is drawn from its allowed options (masks that depend on
the other choices' values are beyond independent choices, in SB3-contrib too).
"""
from __future__ import annotations

import gymnasium as gym
import numpy as np

from xagents.envs.spaces import one_line

MASK_KEY = 'action_mask'  # Gymnasium's info key
MASK_METHOD = 'action_masks'  # SB3-contrib's method
MASKED_LOGIT = -1e8  # SB3-contrib's MaskableCategorical: exp underflows to 0, no inf or nan in the maths
WHO_MASKS = ('masks are for the Discrete actions of PPO, A2C, TRPO, DQN and SAC and the MultiDiscrete actions of '
             'PPO, A2C and TRPO')


def unused_masks(env: str, agent: str, space: gym.Space) -> str:
    """The one line an agent that does not act within masks logs at the start of training on an env that
    offers them (every such agent in the same words)."""
    return (f'{env} offers action masks, which {agent} does not use on {one_line(space)} actions: it may send '
            f'actions the env forbids ({WHO_MASKS})')


class MaskError(ValueError):
    """An action mask that is not one boolean (or 0/1) per action: text, NaN, other numbers, objects, another
    shape. Raised where the mask enters; a run reports an env's as an :class:`~xagents.envs.creation.EnvError`."""


INFO_SOURCE = f"info['{MASK_KEY}']"
METHOD_SOURCE = f'env.{MASK_METHOD}()'


def as_mask(masks, shape: tuple[int, ...] | None, source: str) -> np.ndarray:
    """``masks`` as booleans, or a one-line :class:`MaskError` naming ``source`` (where they came from) and what
    is wrong. Booleans and 0/1 integers or floats are taken exactly (Taxi's int8); text, NaN, infinities, other
    numbers, objects (``None`` entries) and any shape but ``shape`` (None: any) are refused. Vectorised: a
    boolean array of the right shape costs one comparison."""
    if type(masks) is np.ndarray and masks.dtype == np.bool_ and (shape is None or masks.shape == shape):
        return masks
    try:
        array = np.asarray(masks)
    except (ValueError, TypeError):  # ragged nested lists
        raise MaskError(f'action mask from {source} is a ragged {type(masks).__name__}: expected one boolean (or '
                        f'0/1) per action{_shaped(shape)}') from None
    if array.dtype == object and array.ndim == 0:
        raise MaskError(f'action mask from {source} is {_short(masks)}: expected an array of booleans (or 0/1)'
                        f'{_shaped(shape)}')
    if shape is not None and array.shape != shape:
        raise MaskError(f'action mask from {source} is shaped {array.shape}: expected {shape}, one entry per action')
    kind = array.dtype.kind
    if kind == 'b':
        return array
    if kind in 'iuf':
        wrong = (array != 0) & (array != 1)  # NaN compares unequal to both
        if not wrong.any():
            return array != 0
        index = tuple(int(i) for i in np.argwhere(wrong)[0])
        raise MaskError(f'action mask from {source} holds {_short(array[index])} at {list(index)}: expected '
                        f'booleans or 0/1 ({array.dtype})')
    what = {'U': 'text', 'S': 'bytes', 'O': 'objects', 'c': 'complex numbers'}.get(kind, f'{array.dtype} values')
    flat = array.reshape(-1)
    first = next((int(i) for i, value in enumerate(flat) if not _proper(value)), None)
    example = ''
    if first is not None:
        index = [int(i) for i in np.unravel_index(first, array.shape)] if array.ndim else []
        example = f' ({_short(flat[first])} at {index})'
    raise MaskError(f'action mask from {source} holds {what}{example}: expected an array of booleans or 0/1 numbers '
                    f'(bool, int or float), got dtype {array.dtype}')


def _proper(value) -> bool:
    """Whether one entry is a boolean or a 0/1 number (an object array holding only those is still refused)."""
    return isinstance(value, (bool, np.bool_)) or (isinstance(value, (int, float, np.number)) and value in (0, 1))


def _shaped(shape: tuple[int, ...] | None) -> str:
    return '' if shape is None else f' shaped {shape}'


def _short(value) -> str:
    text = repr(value.item() if isinstance(value, np.generic) else value)
    return text if len(text) <= 40 else text[:37] + '...'


class ActionMaskInfo(gym.Wrapper):
    """Put ``env.action_masks()`` (SB3-contrib's) into ``info['action_mask']`` (Gymnasium's) at every reset and
    step, so the masks travel with the results; checked here (:func:`as_mask`, naming ``env.action_masks()``)
    where the actions are masked, as :class:`~xagents.envs.observations.CheckedEnvData` checks the infos'."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        size = mask_size(env.action_space)
        self.shape = None if size is None else (size,)

    def reset(self, **kwargs):
        observation, info = self.env.reset(**kwargs)
        return observation, {**info, MASK_KEY: self._masks('reset')}

    def step(self, action):
        observation, reward, terminated, truncated, info = self.env.step(action)
        return observation, reward, terminated, truncated, {**info, MASK_KEY: self._masks('step')}

    def _masks(self, call: str):
        masks = self.env.get_wrapper_attr(MASK_METHOD)()
        return masks if self.shape is None else as_mask(masks, self.shape, f'{METHOD_SOURCE} in {call}')


def with_mask_info(env: gym.Env) -> gym.Env:
    """``env`` wrapped in :class:`ActionMaskInfo` if it has an ``action_masks`` method, else as it is."""
    return ActionMaskInfo(env) if env.has_wrapper_attr(MASK_METHOD) else env


def mask_segments(space: gym.Space) -> np.ndarray | None:
    """Entries of each choice's part of a mask of ``space``'s actions: ``[n]`` for ``Discrete(n)``, ``nvec`` for
    ``MultiDiscrete`` (None: actions of this space are not masked)."""
    if isinstance(space, gym.spaces.Discrete):
        return np.array([space.n], np.int64)
    if isinstance(space, gym.spaces.MultiDiscrete):
        return space.nvec.ravel().astype(np.int64)
    return None


def mask_size(space: gym.Space) -> int | None:
    """Entries of a mask of ``space``'s actions (None: actions of this space are not masked)."""
    segments = mask_segments(space)
    return None if segments is None else int(segments.sum())


def _parts(masks: np.ndarray, segments: np.ndarray) -> list[np.ndarray]:
    """``(B, sum(segments))`` masks split into each choice's ``(B, segments[i])``."""
    return [masks] if len(segments) == 1 else np.split(masks, np.cumsum(segments)[:-1], axis=-1)


class MaskReader:
    """Reads the masks of a vector env's observations from each reset's and step's ``info``; for a vector env
    whose envs have ``action_masks()`` but do not put it in their infos (one not made by ``create_envs``),
    calls it on every env instead (asked once whether they have it). A single env's masks come as a batch of
    one. Every mask is checked where it is read (:func:`as_mask`, a :class:`MaskError`)."""

    def __init__(self, envs: gym.vector.VectorEnv | gym.Env) -> None:
        self.envs = envs
        self.by_call: bool | None = None  # unknown until the first info without masks
        self.vector = isinstance(envs, gym.vector.VectorEnv)
        size = mask_size(envs.single_action_space if self.vector else envs.action_space)
        self.shape = None if size is None else (envs.num_envs if self.vector else 1, size)

    def offered(self, info: dict) -> bool:
        """Whether the envs offer action masks at all (their actions need not be maskable: said, not used)."""
        if MASK_KEY in info:
            return True
        if not self.vector:
            return self.envs.has_wrapper_attr(MASK_METHOD)
        return self._by_call()

    def __call__(self, info: dict) -> np.ndarray | None:
        """``(n_envs, n)`` masks of the observations a reset or step returned with ``info``, or None if the envs
        offer none (or their actions are not masked). An env that gave none this time (``info['_action_mask']``
        False) allows every action.

        Raises:
            MaskError: a mask is not one boolean (or 0/1) per action.
        """
        if self.shape is None:
            return None
        if not self.vector:
            if MASK_KEY in info:
                return as_mask(info[MASK_KEY], self.shape[1:], INFO_SOURCE)[None]
            if self.envs.has_wrapper_attr(MASK_METHOD):
                return as_mask(self.envs.get_wrapper_attr(MASK_METHOD)(), self.shape[1:], METHOD_SOURCE)[None]
            return None
        if MASK_KEY in info:
            return stacked_masks(info[MASK_KEY], info.get('_' + MASK_KEY), self.shape, INFO_SOURCE)
        if self._by_call():
            return stacked_masks(list(self.envs.call(MASK_METHOD)), None, self.shape, METHOD_SOURCE)
        return None

    def _by_call(self) -> bool:
        if self.by_call is None:
            self.by_call = hasattr(self.envs, 'call') and bool(all(self.envs.call('has_wrapper_attr', MASK_METHOD)))
        return self.by_call


def stacked_masks(masks, given: np.ndarray | None, shape: tuple[int, int], source: str) -> np.ndarray:
    """A vector env's ``(n_envs, n)`` masks as booleans (:func:`as_mask`), every action allowed for envs that gave
    none (``given`` False). Masks a vector env could not stack into one array (lists: an object array of one
    per env) are stacked here first."""
    given = None if given is None or np.all(given) else np.asarray(given, bool)
    if isinstance(masks, (list, tuple)) or (isinstance(masks, np.ndarray) and masks.dtype == object
                                            and masks.shape == shape[:1]):
        rows = [np.ones(shape[1], bool) if given is not None and not given[env] else mask
                for env, mask in enumerate(masks)]
        try:
            masks = np.array(rows)
        except (ValueError, TypeError):
            shapes = sorted({np.shape(row) for row in rows}, key=str)
            raise MaskError(f'action mask from {source} is shaped {" or ".join(map(str, shapes))} across envs: '
                            f'expected {shape[1:]}, one entry per action') from None
        given = None
    masks = as_mask(masks, shape, source)
    if given is not None:
        masks = masks.copy()
        masks[~given] = True
    return masks


def final_masks(masks: np.ndarray, info: dict, dones: np.ndarray) -> np.ndarray:
    """The masks of a step's final observations (what a truncated episode bootstraps from): ``masks``, with those
    of ``info['final_info']`` where an episode ended; every action where the env said nothing (only a
    truncation's bootstrap reads them: a terminal state is never bootstrapped from)."""
    if not dones.any():
        return masks
    finals = masks.copy()
    ended = np.flatnonzero(dones)
    final_info = info.get('final_info') or {}
    if MASK_KEY in final_info:
        given = np.asarray(final_info.get('_' + MASK_KEY, np.ones(len(masks), bool)), bool)
        given_finals = stacked_masks(final_info[MASK_KEY], given, masks.shape, f"{INFO_SOURCE} of a final step")
        finals[ended] = given_finals[ended]
    else:
        finals[ended] = True
    return usable(finals)


def usable(masks: np.ndarray) -> np.ndarray:
    """``masks`` with a row that allows nothing (a terminal state's) allowing everything: a maximum or a softmax
    over no action has no value."""
    empty = ~masks.any(-1)
    if empty.any():
        masks = masks.copy()
        masks[empty] = True
    return masks


def check_masks(masks: np.ndarray, n_envs: int, segments: np.ndarray) -> str | None:
    """What is wrong with masks an agent is about to act on, or None: their shape, or a state that allows no
    action (for several choices, no option of one of them)."""
    size = int(segments.sum())
    if masks.shape != (n_envs, size):
        return f'expected action masks shaped {(n_envs, size)}, got {masks.shape}'
    for choice, part in enumerate(_parts(masks, segments)):
        empty = np.flatnonzero(~part.any(-1))
        if len(empty) and len(segments) == 1:
            return f'env {int(empty[0])} allows no action (its action mask is all False)'
        if len(empty):
            return (f'env {int(empty[0])} allows no action (its action mask allows no option of choice {choice}, '
                    f'entries {int(segments[:choice].sum())}-{int(segments[:choice + 1].sum()) - 1})')
    return None


def mask_kwargs(action_masks: np.ndarray | None) -> dict:
    """``action_masks`` as keyword arguments of acting methods: none when there are none (the acting methods of
    agents that do not mask take none)."""
    return {} if action_masks is None else {'action_masks': action_masks}


def masked_logits_np(logits: np.ndarray, masks: np.ndarray | None) -> np.ndarray:
    """:func:`masked_logits` in NumPy."""
    return logits if masks is None else np.where(masks, logits, np.float32(MASKED_LOGIT)).astype(logits.dtype)


def masked_logits(logits, masks):
    """``logits`` with those of masked actions set to a large negative number (SB3-contrib's -1e8): their
    probabilities are 0 and the softmax, log-probabilities, entropies and KLs are those of the distribution
    renormalised over the allowed actions. ``masks`` None leaves ``logits`` as they are. In ``keras.ops`` (any
    backend, graph mode), imported here: the rest of this module takes no Keras."""
    if masks is None:
        return logits
    from keras import ops

    return ops.where(ops.cast(masks, 'bool'), logits, ops.convert_to_tensor(MASKED_LOGIT, logits.dtype))


def random_valid(rng: np.random.Generator, masks: np.ndarray, segments: np.ndarray | None = None) -> np.ndarray:
    """One action per row of ``masks``, uniform over the allowed ones; with ``segments`` (several choices), one
    option per choice: ``(B, len(segments))``."""
    if segments is None:
        return np.where(masks, rng.random(masks.shape), -1.0).argmax(-1)
    return np.stack([random_valid(rng, part) for part in _parts(masks, segments)], -1)
