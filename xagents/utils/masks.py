"""Action masks: which actions an env allows in each state, and the maths that keeps agents to them.

An env offers masks in one of two ways: SB3-contrib's ``env.action_masks()`` (a boolean array, one entry
per action) or Gymnasium's ``info['action_mask']`` (Taxi: an int8 array of 6), given with every reset and
step. Envs made by :func:`xagents.utils.envs.create_envs` always give them the second way
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

MASK_KEY = 'action_mask'  # Gymnasium's info key
MASK_METHOD = 'action_masks'  # SB3-contrib's method
MASKED_LOGIT = -1e8  # SB3-contrib's MaskableCategorical: exp underflows to 0, no inf or nan in the maths


class ActionMaskInfo(gym.Wrapper):
    """Put ``env.action_masks()`` (SB3-contrib's) into ``info['action_mask']`` (Gymnasium's) at every
    reset and step, so the masks travel with the results."""

    def reset(self, **kwargs):
        observation, info = self.env.reset(**kwargs)
        return observation, {**info, MASK_KEY: self._masks()}

    def step(self, action):
        observation, reward, terminated, truncated, info = self.env.step(action)
        return observation, reward, terminated, truncated, {**info, MASK_KEY: self._masks()}

    def _masks(self) -> np.ndarray:
        return np.asarray(self.env.get_wrapper_attr(MASK_METHOD)(), bool)


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
    one."""

    def __init__(self, envs: gym.vector.VectorEnv | gym.Env) -> None:
        self.envs = envs
        self.by_call: bool | None = None  # unknown until the first info without masks

    def __call__(self, info: dict) -> np.ndarray | None:
        """``(n_envs, n)`` masks of the observations a reset or step returned with ``info``, or None if the envs
        offer none. An env that gave none this time (``info['_action_mask']`` False) allows every action."""
        if not isinstance(self.envs, gym.vector.VectorEnv):
            if MASK_KEY not in info and self.envs.has_wrapper_attr(MASK_METHOD):
                info = {MASK_KEY: self.envs.get_wrapper_attr(MASK_METHOD)()}
            return np.asarray(info[MASK_KEY], bool)[None] if MASK_KEY in info else None
        if MASK_KEY in info:
            masks = np.asarray(info[MASK_KEY]).astype(bool)
            given = info.get('_' + MASK_KEY)
            if given is not None and not np.all(given):
                masks[~np.asarray(given, bool)] = True
            return masks
        if self.by_call is None:
            self.by_call = hasattr(self.envs, 'call') and bool(all(self.envs.call('has_wrapper_attr', MASK_METHOD)))
        if self.by_call:
            return np.stack([np.asarray(mask, bool) for mask in self.envs.call(MASK_METHOD)])
        return None


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
        finals[ended] = np.where(given[ended, None], np.asarray(final_info[MASK_KEY])[ended].astype(bool), True)
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
    renormalised over the allowed actions. ``masks`` None leaves ``logits`` as they are."""
    if masks is None:
        return logits
    from xagents.utils.quiet_tensorflow import tf

    return tf.where(tf.cast(masks, tf.bool), logits, tf.constant(MASKED_LOGIT, logits.dtype))


def random_valid(rng: np.random.Generator, masks: np.ndarray, segments: np.ndarray | None = None) -> np.ndarray:
    """One action per row of ``masks``, uniform over the allowed ones; with ``segments`` (several choices), one
    option per choice: ``(B, len(segments))``."""
    if segments is None:
        return np.where(masks, rng.random(masks.shape), -1.0).argmax(-1)
    return np.stack([random_valid(rng, part) for part in _parts(masks, segments)], -1)
