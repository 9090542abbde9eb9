"""Play one episode with a trained agent: on screen, as an mp4, and/or as jpg frames."""
from __future__ import annotations

import logging
import os

import gymnasium as gym
import numpy as np

from xagents.utils.envs import make_env

logger = logging.getLogger('xagents')


def play_episode(agent, env_id: str, video_dir: str | None = None, frame_dir: str | None = None,
                 frame_frequency: int = 1, max_steps: int | None = None, render: bool = False,
                 preprocess: bool | None = None, seed: int | None = None) -> float:
    """Run one deterministic episode of ``agent`` on a fresh ``env_id`` env; return its reward."""
    import cv2

    if frame_frequency < 1:
        raise ValueError(f'expected frame_frequency >= 1, got {frame_frequency}')
    if max_steps is not None and max_steps < 1:
        raise ValueError(f'expected max_steps >= 1, got {max_steps}')
    recording = bool(video_dir or frame_dir)
    env = make_env(env_id, preprocess, render_mode='human' if render else ('rgb_array' if recording else None))
    if video_dir:
        # Gymnasium's recorder encodes H.264 through moviepy, playable by browsers and players alike.
        env = gym.wrappers.RecordVideo(env, video_dir, episode_trigger=lambda _: True,
                                       name_prefix=env_id.replace('/', '-'), disable_logger=True)
    observation, _ = env.reset(seed=seed)
    total, step, done = 0.0, 0, False
    try:
        while not done and (max_steps is None or step < max_steps):
            if frame_dir and step % frame_frequency == 0:
                os.makedirs(frame_dir, exist_ok=True)
                frame = cv2.cvtColor(np.asarray(env.render()), cv2.COLOR_RGB2BGR)
                cv2.imwrite(os.path.join(frame_dir, f'{step:06d}.jpg'), frame)
            action = agent.act(np.asarray(observation)[None], deterministic=True)[0]
            observation, reward, terminated, truncated, _ = env.step(action)
            total += float(reward)
            done = terminated or truncated
            step += 1
    finally:
        env.close()
    if video_dir:
        logger.info('Video written to %s', video_dir)
    return total
