"""Atari games stepped by ale-py's own C++ vector env (``ale_py.vector_env.AtariVectorEnv``), which emulates,
skips, max-pools, resizes and stacks frames in threads: about twice the steps per second of Gymnasium's Python
vector env with its wrappers on a 2-core CPU.

:class:`AleVectorEnv` gives the learner what :func:`xagents.envs.creation.make_env`'s wrappers give: the same frames
(84x84 grayscale, max-pooled over the last two of 4 skipped frames, stacked channels-last), rewards clipped to
their sign, a terminal state per lost life while the game goes on, FIRE after a reset, up to 30 no-ops, the
game's time limit, and whole games with their own score reported below all of it (lengths in frames). Where the
two differ:

- after a lost life the agent acts at once: no no-op and no FIRE are played for it (as with envpool in CleanRL's
  envpool scripts), so in a game such as Breakout the agent learns to press FIRE itself;
- FIRE after a reset is one frame (ALE's own), not the two agent steps (FIRE, then action 2) of Baselines;
- the no-ops at a reset are drawn by ALE from the reset's seed, not by Gymnasium.

Frames are stacked here, as ``FrameStackObservation`` does: an episode's first stack (after a reset or a lost
life) repeats its first frame, which is what the replay buffers that store each frame once expect. On the same
actions, without no-ops and FIRE, every reward, termination, score and observation is identical, with a terminal state per lost life at the same steps (``xagents/tests/test_ale_vector.py``).

The games are built :data:`GAMES_PER_BUILD` at a time, each group a C++ vector env of its own, stepped together:
ale-py holds the GIL while it builds a vector env (0.2-0.4 s a game on a 2-core CPU), so a Ctrl-C or SIGTERM while
thousands of games are built waits for one group, not for all of them.
"""
from __future__ import annotations

import atexit
import logging
import os
import weakref

import gymnasium as gym
import numpy as np

from gymnasium.vector.utils import batch_space

from xagents.utils.console import stop_if_interruption_dropped

AUTORESET_MODE = gym.vector.AutoresetMode.SAME_STEP
FRAME_SKIP = 4  # emulator frames per agent step; a game's reported length counts frames, as below make_env's wrappers
GAMES_PER_BUILD = 8  # games built in one C++ call, which Python cannot interrupt: 2-3 s at most here
logger = logging.getLogger(__name__)
_OPEN: weakref.WeakSet[AleVectorEnv] = weakref.WeakSet()  # the envs whose games are still built


@atexit.register
def _free_games() -> None:
    """Free every game still built at exit, by dropping the last references to them: xagents freezes the garbage
    collector at exit (so that shutdown does not walk Keras' objects), so games that an agent's reference cycles hold
    would outlive the interpreter, which ale-py's extension reports in about 30 lines of ``nanobind: leaked``."""
    for env in list(_OPEN):
        env.close_extras()


class AleVectorEnv(gym.vector.VectorEnv):
    """``n_envs`` preprocessed games of one ALE id, stepped together by ale-py's C++ vector env (see the module)."""

    def __init__(self, spec: gym.envs.registration.EnvSpec, n_envs: int, max_frame: bool = True,
                 clip_rewards: bool = True, terminal_on_life_loss: bool = True, fire_reset: bool = True,
                 frame_stack: int = 4, noop_max: int = 30, max_episode_frames: int | None = None) -> None:
        from ale_py.vector_env import AtariVectorEnv

        game = spec.kwargs['game']
        frames = spec.kwargs.get('max_num_frames_per_episode') or 108_000
        settings = dict(
            autoreset_mode=AUTORESET_MODE, frameskip=FRAME_SKIP, maxpool=max_frame, stack_num=1,
            noop_max=noop_max, use_fire_reset=fire_reset, episodic_life=False, life_loss_info=False,
            reward_clipping=False, repeat_action_probability=spec.kwargs.get('repeat_action_probability', 0.0),
            full_action_space=spec.kwargs.get('full_action_space', False),
            max_num_frames_per_episode=min(frames, max_episode_frames or frames),
        )
        sizes = [min(GAMES_PER_BUILD, n_envs - start) for start in range(0, n_envs, GAMES_PER_BUILD)]
        cores = len(os.sched_getaffinity(0))
        self.games: list[AtariVectorEnv] = []
        if n_envs > 64:  # a build of a minute or more (0.2-0.4 s a game): said before it starts
            logger.info('Making %d %s games, %d at a time', n_envs, spec.id, GAMES_PER_BUILD)
        try:
            for size in sizes:  # the machine's cores shared among the groups' thread pools
                self.games.append(AtariVectorEnv(game, size, num_threads=max(1, min(size, cores * size // n_envs)),
                                                 **settings))
                stop_if_interruption_dropped()  # a signal's interrupt that Python dropped amid a build stops it too
        except BaseException:  # an interrupt between two groups: the ones built are freed now, not at exit
            self.games.clear()
            raise
        _OPEN.add(self)
        self.bounds = np.cumsum(sizes)[:-1]  # where each group's envs start, after the first
        self.num_envs = n_envs
        self.clip_rewards, self.terminal_on_life_loss = clip_rewards, terminal_on_life_loss
        frame = self.games[0].single_observation_space.shape[1:]
        self.single_observation_space = gym.spaces.Box(0, 255, (*frame, frame_stack), np.uint8)
        self.single_action_space = self.games[0].single_action_space
        self.observation_space = batch_space(self.single_observation_space, n_envs)
        self.action_space = batch_space(self.single_action_space, n_envs)
        self.metadata = {'autoreset_mode': AUTORESET_MODE}
        self.spec = spec
        self.lives = np.zeros(n_envs, np.int64)
        self.scores = np.zeros(n_envs)
        self.lengths = np.zeros(n_envs, np.int64)
        self.stacks = np.zeros((n_envs, *frame, frame_stack), np.uint8)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """Start a new game in every env (env ``i`` seeded with ``seed + i``), or in those of ``options['reset_mask']``
        (the ``j``-th of them seeded with ``seed + j``); the others go on."""
        chosen = np.ones(self.num_envs, bool) if not options or 'reset_mask' not in options else options['reset_mask']
        if not isinstance(chosen, np.ndarray) or chosen.dtype != np.bool_ or chosen.shape != (self.num_envs,):
            raise ValueError(f'expected a reset_mask of {self.num_envs} booleans, got {chosen!r}')
        first = 0 if seed is None else seed
        for game, group in zip(self.games, np.split(np.arange(self.num_envs), self.bounds)):
            mask = chosen[group]
            if not mask.any():
                continue
            observations, info = game.reset(seed=None if seed is None else first,
                                            options=None if mask.all() else {'reset_mask': mask})
            first += int(mask.sum())
            envs = group[mask]
            self.lives[envs] = np.asarray(info['lives'], np.int64)[mask]
            self.stacks[envs] = observations[mask, 0, :, :, None]
        self.scores[chosen], self.lengths[chosen] = 0, 0
        return self.stacks.copy(), {'lives': self.lives.copy()}

    def step(self, actions: np.ndarray):
        """One agent step of every game; a game that ends is restarted in the same step (``SAME_STEP``), its last
        frame stack in ``info['final_obs']`` and its score in ``info['final_info']['episode']``."""
        observations, rewards, game_over, truncated, info = self._step_games(np.asarray(actions, np.int64))
        self.scores += rewards
        self.lengths += 1
        ended = game_over | truncated
        lives = np.asarray(info['lives'], np.int64)
        terminated = game_over | (self.terminal_on_life_loss & ~ended & (0 < lives) & (lives < self.lives))
        self.lives = lives
        dones = terminated | truncated
        self.stacks[..., :-1] = self.stacks[..., 1:]
        self.stacks[..., -1] = observations[:, 0]
        out = {'lives': lives}
        if dones.any():
            finals = self.stacks.copy()
            if ended.any():  # the game restarted: its last frame is in final_obs
                finals[ended, ..., -1] = info['final_obs'][ended]
            self.stacks[dones] = self.stacks[dones, ..., -1:]  # a new episode's stack repeats its first frame
            out['final_obs'], out['_final_obs'] = finals, dones
            out['final_info'] = {'episode': {'r': np.where(ended, self.scores, 0.0),
                                             'l': np.where(ended, self.lengths * FRAME_SKIP, 0)},
                                 '_episode': ended.copy()}
            self.scores[ended], self.lengths[ended] = 0, 0
        learned = np.sign(rewards) if self.clip_rewards else rewards
        return self.stacks.copy(), learned.astype(np.float64), terminated, truncated, out

    def _step_games(self, actions: np.ndarray) -> tuple[np.ndarray, ...]:
        """Step every group (each steps in its own threads meanwhile) and join their results: frames, rewards,
        game overs, truncations, and info with ``lives`` and, where a game ended, its last frame (``final_obs``)."""
        for game, part in zip(self.games, np.split(actions, self.bounds)):
            game.send(part)
        results = [game.recv() for game in self.games]
        observations, rewards, game_over, truncated = (np.concatenate([result[index] for result in results])
                                                       for index in range(4))
        info = {'lives': np.concatenate([result[4]['lives'] for result in results])}
        if (game_over | truncated).any():
            info['final_obs'] = np.concatenate([result[4]['final_obs'][:, 0] if 'final_obs' in result[4]
                                                else np.zeros_like(result[0][:, 0]) for result in results])
        return observations, rewards, game_over, truncated, info

    def close_extras(self, **kwargs) -> None:
        self.games.clear()
        _OPEN.discard(self)
