"""Play one episode with a trained agent: on screen, as an mp4, and/or as jpg frames."""
from __future__ import annotations

import logging
import os

import gymnasium as gym
import numpy as np

from xagents.utils.envs import env_settings, make_env

logger = logging.getLogger('xagents')


def play_episode(agent, env_id: str | None = None, video_dir: str | None = None, frame_dir: str | None = None,
                 frame_frequency: int = 1, max_steps: int | None = None, render: bool = False,
                 seed: int | None = None) -> float:
    """Run one deterministic episode (a whole game) of ``agent``; return its score.

    The env is made as the agent's training envs were (``env_id`` may name another id); the
    video is recorded below every wrapper, so it shows the whole game, lives lost included.
    """
    import cv2

    if frame_frequency < 1:
        raise ValueError(f'expected frame_frequency >= 1, got {frame_frequency}')
    if max_steps is not None and max_steps < 1:
        raise ValueError(f'expected max_steps >= 1, got {max_steps}')
    settings = dict(env_settings(agent.envs) or {})
    settings['env_id'] = env_id or settings.get('env_id')
    if not settings['env_id']:
        raise ValueError('expected an env_id to play on (the agent\'s envs were not made by create_envs)')
    def recorder(env: gym.Env) -> gym.Env:
        # Gymnasium's recorder encodes H.264 through moviepy, playable by browsers and players alike.
        return gym.wrappers.RecordVideo(env, video_dir, episode_trigger=lambda _: True, disable_logger=True,
                                       name_prefix=settings['env_id'].replace('/', '-'))
    render_mode = 'human' if render else ('rgb_array' if video_dir or frame_dir else None)
    env = make_env(**settings, render_mode=render_mode, raw_wrapper=recorder if video_dir else None)
    score = _statistics(env)
    observation, _ = env.reset(seed=seed)
    step = 0
    try:
        while max_steps is None or step < max_steps:
            if frame_dir and step % frame_frequency == 0:
                os.makedirs(frame_dir, exist_ok=True)
                frame = cv2.cvtColor(np.asarray(env.render()), cv2.COLOR_RGB2BGR)
                cv2.imwrite(os.path.join(frame_dir, f'{step:06d}.jpg'), frame)
            action = agent.act(np.asarray(observation)[None], deterministic=True)[0]
            observation, _, terminated, truncated, info = env.step(action)
            step += 1
            if 'episode' in info:  # the game is over
                return float(info['episode']['r'])
            if terminated or truncated:  # a lost life ended the learner's episode: play on
                observation, _ = env.reset()
        return float(score.episode_returns)
    finally:
        env.close()
        if video_dir:
            logger.info('Video written to %s', video_dir)


def _statistics(env: gym.Env) -> gym.wrappers.RecordEpisodeStatistics:
    """The wrapper scoring ``env``'s game (``make_env`` puts it right on the raw env)."""
    while not isinstance(env, gym.wrappers.RecordEpisodeStatistics):
        env = env.env
    return env
