"""Play episodes with a trained agent: on screen, as mp4s, and/or as jpg frames."""
from __future__ import annotations

import logging
import os
import sys
import warnings

import gymnasium as gym
import numpy as np

from xagents.storage.atomic import check_writable
from xagents.envs.creation import make_env, settings_for
from xagents.envs.masks import mask_kwargs
from xagents.networks.recurrence import memory_kwargs
from xagents.training.evaluation import STEP_LIMIT, own_limit

logger = logging.getLogger('xagents')


def play_episodes(agent, env_id: str | None = None, video_dir: str | None = None, frame_dir: str | None = None,
                  frame_frequency: int = 1, max_steps: int | None = None, render: bool = False,
                  seed: int | None = None, episodes: int = 1) -> list[tuple[float, int]]:
    """Run ``episodes`` deterministic episodes (whole games) of ``agent`` one after another on one env,
    the first reset seeded; return each one's score and length.

    The env is made as the agent's training envs were (``env_id`` may name another id); the
    video is recorded below every wrapper, so it shows the whole game, lives lost included.
    """
    import cv2

    if frame_frequency < 1:
        raise ValueError(f'expected frame_frequency >= 1, got {frame_frequency}')
    if frame_frequency != 1 and not frame_dir:
        raise ValueError('frame_frequency is for frames saved in a frame_dir: give one (--frame-dir)')
    if max_steps is not None and max_steps < 1:
        raise ValueError(f'expected max_steps >= 1, got {max_steps}')
    settings = settings_for(agent.envs, env_id)
    capped = max_steps is None and not own_limit(settings)
    if capped:  # an env without a limit of its own: a game that never ends must not play forever
        max_steps = STEP_LIMIT
    prepare_display(render)
    for directory in (video_dir, frame_dir):
        if directory:
            check_writable(directory, directory=True)
    if frame_dir:
        os.makedirs(frame_dir, exist_ok=True)
    name = settings['env_id'].replace('/', '-')
    video_prefix = video_dir and unused_prefix(video_dir, name, lambda prefix: f'{prefix}-episode-0.mp4')
    frame_prefix = frame_dir and unused_prefix(frame_dir, name, lambda prefix: f'{prefix}-{0:06d}.jpg')

    def recorder(env: gym.Env) -> gym.Env:
        # Gymnasium's recorder encodes H.264 through moviepy, playable by browsers and players alike. Its
        # warning about an existing folder does not apply: the prefix is one no file there has.
        with warnings.catch_warnings():
            warnings.filterwarnings('ignore', message='.*Overwriting existing videos.*')
            return gym.wrappers.RecordVideo(env, video_dir, episode_trigger=lambda _: True, disable_logger=True,
                                           name_prefix=video_prefix)
    render_mode = 'human' if render else ('rgb_array' if video_dir or frame_dir else None)
    env = make_env(**settings, render_mode=render_mode, raw_wrapper=recorder if video_dir else None)
    score, games, frame_step = _statistics(env), [], 0
    read_masks = agent.mask_reader(env)  # the action masks the env gives, when the agent acts within them
    try:
        for episode in range(episodes):
            observation, info = env.reset(seed=seed if episode == 0 else None)
            memory = agent.new_memory(1)  # a recurrent policy's state, from the game's start
            step = 0
            while max_steps is None or step < max_steps:
                if frame_dir and step % frame_frequency == 0:
                    frame = cv2.cvtColor(np.asarray(env.render()), cv2.COLOR_RGB2BGR)
                    cv2.imwrite(os.path.join(frame_dir, f'{frame_prefix}-{frame_step:06d}.jpg'), frame)
                action = agent.act(agent.observation_batch(observation)[0], True, **mask_kwargs(read_masks(info)),
                                   **memory_kwargs(memory))[0]
                observation, _, terminated, truncated, info = env.step(action)
                if memory:  # a lost life begins the learner's next episode (as in training)
                    memory.advance([terminated or truncated])
                step += 1
                frame_step += 1
                if 'episode' in info:  # the game is over
                    games.append((float(info['episode']['r']), int(info['episode']['l'])))
                    break
                if terminated or truncated:  # a lost life ended the learner's episode: play on
                    observation, info = env.reset()
            else:  # max_steps cut the game short
                games.append((float(score.episode_returns), int(score.episode_lengths)))
                if capped:
                    logger.warning('Play cut game %d at %s steps: the env sets no limit of its own (pass max_steps, '
                                   '--max-steps, to change it)', episode + 1, f'{max_steps:,}')
        return games
    finally:
        env.close()
        if video_dir:
            logger.info('Video written to %s', video_dir)


def prepare_display(render: bool) -> None:
    """Set SDL up before pygame opens anything: a window only when rendering to a screen.

    Without a screen to render to, SDL's dummy driver draws frames without probing for one (and
    without its ``XDG_RUNTIME_DIR`` complaint). With a window, SDL's accelerated framebuffer would
    load Mesa's GL, whose LLVM collides with TensorFlow's and crashes the process.
    """
    if not render:
        os.environ.setdefault('SDL_VIDEODRIVER', 'dummy')
        return
    if sys.platform.startswith('linux') and not (os.environ.get('DISPLAY') or os.environ.get('WAYLAND_DISPLAY')):
        raise ValueError('--render needs a display and none is set (DISPLAY): record the game with '
                         '--video-dir or --frame-dir instead')
    os.environ.setdefault('SDL_FRAMEBUFFER_ACCELERATION', '0')


def unused_prefix(directory: str, name: str, first_file) -> str:
    """``name``, or ``name-2``, ``name-3``...: the first prefix whose files are not in ``directory`` yet."""
    prefix, number = name, 1
    while os.path.exists(os.path.join(directory, first_file(prefix))):
        number += 1
        prefix = f'{name}-{number}'
    return prefix


def _statistics(env: gym.Env) -> gym.wrappers.RecordEpisodeStatistics:
    """The wrapper scoring ``env``'s game (``make_env`` puts it right on the raw env)."""
    while not isinstance(env, gym.wrappers.RecordEpisodeStatistics):
        env = env.env
    return env
