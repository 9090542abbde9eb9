"""Environment creation: ``gymnasium.make``, Atari preprocessing, vectorising and seeding.

Every vector env made here uses Gymnasium's ``SAME_STEP`` autoreset: a step that ends an
episode returns the next episode's reset observation and puts the true final observation in
``info["final_obs"]``. No reset transition ever reaches a rollout or a replay buffer, and the
final observation of a time-limit truncation is available to bootstrap from.
"""
from __future__ import annotations

import functools

import gymnasium as gym
import numpy as np

AUTORESET_MODE = gym.vector.AutoresetMode.SAME_STEP


def _register_atari() -> None:
    """Make ``ALE/...`` and ``...NoFrameskip-v4`` ids known to Gymnasium (ale-py ships the ROMs)."""
    import ale_py

    gym.register_envs(ale_py)


def env_spec(env_id: str) -> gym.envs.registration.EnvSpec:
    """Return the registered spec of ``env_id`` or raise a ValueError a user can act on."""
    if 'ALE/' in env_id or 'NoFrameskip' in env_id or env_id not in gym.registry:
        _register_atari()
    if env_id not in gym.registry:
        close = [name for name in gym.registry if name.lower().startswith(env_id.split('-')[0].lower())]
        hint = f' (did you mean {", ".join(sorted(close)[:3])}?)' if close else ''
        raise ValueError(f'unknown environment id {env_id!r}{hint}')
    return gym.spec(env_id)


def is_atari(env_id: str) -> bool:
    """True for Arcade Learning Environment ids, which get Atari preprocessing by default."""
    entry_point = env_spec(env_id).entry_point
    return isinstance(entry_point, str) and entry_point.startswith('ale_py')


class ChannelsLast(gym.ObservationWrapper):
    """Move the frame-stack axis of ``(K, H, W)`` observations last, as Keras convolutions expect."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        space = env.observation_space
        self.observation_space = gym.spaces.Box(
            np.moveaxis(space.low, 0, -1), np.moveaxis(space.high, 0, -1), dtype=space.dtype
        )

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return np.moveaxis(observation, 0, -1)


def make_env(
    env_id: str,
    preprocess: bool | None = None,
    max_frame: bool = True,
    frame_stack: int = 4,
    render_mode: str | None = None,
) -> gym.Env:
    """Make one environment, with Atari preprocessing when asked (by default for ALE ids).

    Preprocessing: up to 30 no-op actions on reset, skip 4 frames (max-pooling the last two
    when ``max_frame``), 84x84 grayscale, ``frame_stack`` frames stacked channels-last, uint8.
    """
    env_spec(env_id)
    preprocess = is_atari(env_id) if preprocess is None else preprocess
    if not preprocess:
        return gym.make(env_id, render_mode=render_mode, disable_env_checker=True)
    kwargs = {'render_mode': render_mode, 'disable_env_checker': True}
    if is_atari(env_id):
        # Frame skipping belongs to the wrapper (which max-pools); with max_frame off the emulator
        # skips frames itself and returns the last one, as ALE v5 ids do.
        kwargs['frameskip'] = 1 if max_frame else 4
    env = gym.make(env_id, **kwargs)
    if len(env.observation_space.shape) != 3:
        raise ValueError(
            f'--preprocess expects an image environment, got {env_id} with observations of '
            f'shape {env.observation_space.shape}'
        )
    env = gym.wrappers.AtariPreprocessing(
        env, noop_max=30, frame_skip=4 if max_frame else 1, screen_size=84
    )
    return ChannelsLast(gym.wrappers.FrameStackObservation(env, frame_stack))


def create_envs(
    env_id: str,
    n_envs: int = 1,
    seed: int | None = None,
    preprocess: bool | None = None,
    max_frame: bool = True,
    async_envs: bool = False,
) -> gym.vector.VectorEnv:
    """Create ``n_envs`` copies of ``env_id`` as one Gymnasium vector env.

    Args:
        env_id: A registered Gymnasium id, e.g. ``CartPole-v1`` or ``PongNoFrameskip-v4``.
        n_envs: Number of environments stepped together.
        seed: Seeds env ``i`` with ``seed + i`` on the first reset, and the action space.
        preprocess: Atari preprocessing (default: on for ALE ids, off for others).
        max_frame: Max-pool the last two of the skipped frames while preprocessing.
        async_envs: Step the envs in subprocesses (worth it for heavy envs such as Atari).
    """
    if n_envs < 1:
        raise ValueError(f'expected n_envs >= 1, got {n_envs}')
    env_spec(env_id)
    make = functools.partial(make_env, env_id, preprocess, max_frame)
    vector_class = gym.vector.AsyncVectorEnv if async_envs else gym.vector.SyncVectorEnv
    envs = vector_class([make] * n_envs, autoreset_mode=AUTORESET_MODE)
    # Enough to make more envs like these (deterministic evaluation, play).
    envs.metadata['xagents'] = {'env_id': env_id, 'preprocess': preprocess, 'max_frame': max_frame}
    if seed is not None:
        envs.action_space.seed(seed)
    return envs
