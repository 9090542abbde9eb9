"""Environment creation: ``gymnasium.make``, Atari preprocessing, vectorising and seeding.

Every vector env made here uses Gymnasium's ``SAME_STEP`` autoreset: a step that ends an
episode returns the next episode's reset observation and puts the true final observation in
``info["final_obs"]``. No reset transition ever reaches a rollout or a replay buffer, and the
final observation of a time-limit truncation is available to bootstrap from.

Every env is scored below all of its wrappers (Gymnasium's ``RecordEpisodeStatistics`` sits right
on the raw env), so the returns that histories, progress lines and evaluations report are whole
games with the game's own rewards, whatever the learner sees (clipped rewards, a terminal state
per lost life).
"""
from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
import os
import signal
import tracemalloc
import warnings
from typing import Callable, Sequence

import gymnasium as gym
import numpy as np

from xagents.envs import goal_envs, no_velocity  # noqa: F401  (register BitFlipping-v0, PointReach-v0, CartPoleNoVel-v1...)
from xagents.envs.ale_vector import AleVectorEnv
from xagents.utils.console import interrupts_deferred
from xagents.envs.masks import with_mask_info
from xagents.envs.observations import CheckedEnvData
from xagents.utils.memory import ALE_GAME_BYTES, check_fits
from xagents.utils.validation import check_value, validated

AUTORESET_MODE = gym.vector.AutoresetMode.SAME_STEP
NO_EPISODES = (np.zeros(0, np.int64), np.zeros(0), np.zeros(0, np.int64))


class EnvError(RuntimeError):
    """An env failed while it ran: it raised, or returned a non-finite or malformed value. The run stops there,
    before the value reaches an update; the files written before are those of the last good point."""


def env_name(envs: gym.vector.VectorEnv) -> str:
    """How messages name ``envs``: the id they were made from, else the env's class."""
    settings = envs.metadata.get('xagents') or {}
    if settings.get('env_id'):
        return settings['env_id']
    spec = getattr(envs, 'spec', None)
    return spec.id if spec is not None else type(getattr(envs, 'envs', [envs])[0].unwrapped).__name__


@contextlib.contextmanager
def env_call(envs: gym.vector.VectorEnv, call: str, step: int | None):
    """Turn an exception raised by the envs' ``call`` at env step ``step`` (None: outside training) into one
    :class:`EnvError` naming the env, the call and the error (an async worker's own error lines are not
    printed: this one says it)."""
    level = gym.logger.min_level
    gym.logger.min_level = gym.logger.ERROR + 1 if isinstance(envs, gym.vector.AsyncVectorEnv) else level
    try:
        yield
    except Exception as error:
        hint = (' (step returns an observation of the observation space\'s shape and a number as reward)'
                if call == 'step' and isinstance(error, ValueError) and 'sequence' in str(error) else '')
        when = '' if step is None else f' at env step {step:,}'
        raise EnvError(f'{env_name(envs)} failed in {call}{when}: {type(error).__name__}: {error}{hint}') from error
    finally:
        gym.logger.min_level = level


def check_finite(envs: gym.vector.VectorEnv, step: int, **values: np.ndarray) -> None:
    """Raise an :class:`EnvError` naming the env, the step and the value if any of ``values`` (name: an array
    with one row per env) holds a nan or an infinity; integer arrays (Atari frames) cannot."""
    for name, array in values.items():
        if array.dtype.kind == 'f' and not np.isfinite(array).all():
            index = tuple(np.argwhere(~np.isfinite(array))[0])
            where = ''.join(f'[{i}]' for i in index[1:])
            raise EnvError(f'{env_name(envs)} returned a non-finite {name}{where} ({array[index]}) in env {index[0]} at '
                           f'env step {step:,}: the run stops before it reaches the weights')


def _register_atari() -> None:
    """Make ``ALE/...`` and ``...NoFrameskip-v4`` ids known to Gymnasium (ale-py ships the ROMs); ALE's
    warnings still show, its banner (info) no longer lands in the middle of a run's output."""
    with interrupts_deferred():  # a Ctrl-C while its C++ loads would abort the process
        import ale_py

    ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Warning)
    gym.register_envs(ale_py)


def _mujoco_warnings_as_python_warnings() -> None:
    """MuJoCo prints its warnings and appends them to ``MUJOCO_LOG.TXT`` in the working directory (each
    HalfCheetah-v5 compile warns that Gymnasium's model uses a deprecated attribute); as Python warnings
    they show once per run, can be filtered, and leave no file behind."""
    import mujoco

    mujoco.set_mju_user_warning(functools.partial(warnings.warn, category=RuntimeWarning, stacklevel=2))


def env_spec(env_id: str) -> gym.envs.registration.EnvSpec:
    """Return the registered spec of ``env_id`` or raise a ValueError a user can act on.

    ``module:EnvName-v0`` imports ``module`` first (which registers a user's own env), as ``gym.make`` does.
    """
    if ':' in env_id:
        module, _, env_id = env_id.partition(':')
        try:
            importlib.import_module(module)
        except Exception as error:  # a user's module: any error in it (a NameError...) is theirs to fix
            raise ValueError(f'cannot import {module!r} to make {env_id!r}: {type(error).__name__}: {error}') from None
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


class EpisodicLife(gym.Wrapper):
    """A lost life ends the learner's episode; the game itself restarts only when it is over.

    DeepMind's Atari training signal (Mnih et al. 2015; Baselines' and Stable-Baselines3's
    ``EpisodicLifeEnv``): the step that loses a life returns ``terminated``, so no value is
    bootstrapped across it, and the ``reset`` that follows plays one no-op instead of restarting
    the game. (Gymnasium's ``terminal_on_life_loss`` restarts the whole game at every life.)
    """

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.lives = 0
        self.game_over = True

    def step(self, action):
        observation, reward, terminated, truncated, info = self.env.step(action)
        self.game_over = terminated or truncated
        lives = self.env.unwrapped.ale.lives()
        if 0 < lives < self.lives:
            terminated = True
        self.lives = lives
        return observation, reward, terminated, truncated, info

    def reset(self, **kwargs):
        if self.game_over:
            observation, info = self.env.reset(**kwargs)
        else:
            observation, _, terminated, truncated, info = self.env.step(0)
            if terminated or truncated:
                observation, info = self.env.reset(**kwargs)
        self.game_over = False
        self.lives = self.env.unwrapped.ale.lives()
        return observation, info


class FireReset(gym.Wrapper):
    """Press FIRE (then action 2) after every reset, for games that wait for it (Baselines' ``FireResetEnv``)."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        if not needs_fire(env):
            raise ValueError(f'FireReset expects a game whose action 1 is FIRE, got {env.unwrapped.spec.id}')

    def reset(self, **kwargs):
        observation, info = self.env.reset(**kwargs)
        for action in (1, 2):
            observation, _, terminated, truncated, info = self.env.step(action)
            if terminated or truncated:
                observation, info = self.env.reset(**kwargs)
        return observation, info


def filtered_observations(env: gym.Env, env_id: str, keys: Sequence[str]) -> gym.Env:
    """``env`` observing only ``keys`` of its Dict observations (refused in one line for other spaces and keys)."""
    space = env.observation_space
    if not isinstance(space, gym.spaces.Dict):
        raise ValueError(f'observation_keys picks keys of Dict observations, and {env_id} observes {space}')
    unknown = [key for key in keys if key not in space.spaces]
    if unknown:
        raise ValueError(f'{env_id} observes no key {unknown[0]!r}: expected some of {", ".join(space.spaces)}')
    return gym.wrappers.FilterObservation(env, list(keys))


def one_hot_observations(env: gym.Env) -> gym.Env:
    """Observe ``Discrete(n)`` states as one-hot float vectors of length n (FrozenLake, Taxi...)."""
    space = env.observation_space
    identity = np.eye(space.n, dtype=np.float32)
    return gym.wrappers.TransformObservation(env, lambda state: identity[int(state) - space.start],
                                             OneHot(int(space.n)))


class OneHot(gym.spaces.Box):
    """The observation space of one-hot encoded ``Discrete(n)`` states."""

    def __init__(self, n: int) -> None:
        super().__init__(0.0, 1.0, (n,), np.float32)


def one_hot_size(space: gym.Space) -> int | None:
    """n if ``space`` holds one-hot encoded ``Discrete(n)`` states, else None."""
    return space.shape[0] if isinstance(space, OneHot) else None


def needs_fire(env: gym.Env) -> bool:
    """Whether an Atari game's action 1 is FIRE (games that wait for it after a reset)."""
    meanings = env.unwrapped.get_action_meanings()
    return len(meanings) >= 3 and meanings[1] == 'FIRE'


def make_env(
    env_id: str,
    preprocess: bool | None = None,
    max_frame: bool = True,
    clip_rewards: bool | None = None,
    terminal_on_life_loss: bool | None = None,
    fire_reset: bool | None = None,
    frame_stack: int = 4,
    noop_max: int = 30,
    render_mode: str | None = None,
    raw_wrapper: Callable[[gym.Env], gym.Env] | None = None,
    env_kwargs: dict | None = None,
    observation_keys: Sequence[str] | None = None,
    wrapper: str | Callable[[gym.Env], gym.Env] | None = None,
) -> gym.Env:
    """Make one environment, with Atari preprocessing when asked (by default for ALE ids).

    Atari preprocessing as DeepMind trained (Baselines' ``wrap_deepmind``, SB3's ``AtariWrapper``):
    up to ``noop_max`` (30) no-op actions on reset, skip 4 frames (max-pooling the last two when
    ``max_frame``), 84x84 grayscale, a terminal state per lost life, FIRE after a reset, rewards
    clipped to their sign, ``frame_stack`` frames stacked channels-last, uint8. The last three
    (before stacking) default to on with preprocessing and can each be turned off.

    ``raw_wrapper`` wraps the raw env below everything else (``play`` records whole games there);
    ``env_kwargs`` go to ``gym.make``; ``observation_keys`` keeps these keys of a Dict observation
    (``gymnasium.wrappers.FilterObservation``: MiniGrid's image and direction without its mission text);
    ``wrapper`` (a function ``gym.Env -> gym.Env``, or its ``module:name``) wraps the env last, above every other
    wrapper: what it changes the agent sees, while scores stay the game's.
    """
    entry_point = env_spec(env_id).entry_point
    if isinstance(entry_point, str) and entry_point.startswith('gymnasium.envs.mujoco'):
        _mujoco_warnings_as_python_warnings()
    preprocess = is_atari(env_id) if preprocess is None else preprocess
    kwargs = {'disable_env_checker': True}
    if render_mode is not None:  # only when rendering: a user's env need not take render_mode (Gymnasium's own make)
        kwargs['render_mode'] = render_mode
    if preprocess and is_atari(env_id):
        # Frame skipping belongs to the wrapper (which max-pools); with max_frame off the emulator
        # skips frames itself and returns the last one, as ALE v5 ids do.
        kwargs['frameskip'] = 1 if max_frame else 4
    try:
        env = gym.make(env_id, **kwargs, **(env_kwargs or {}))
    except Exception as error:  # the env's own code failed: one line naming it, its arguments and the error
        given = f' with env_kwargs {env_kwargs}' if env_kwargs else ''
        raise ValueError(f'making {env_id}{given} failed: {type(error).__name__}: {error}') from None
    env = CheckedEnvData(with_mask_info(env))  # observations and action masks checked where they enter
    if raw_wrapper is not None:
        env = raw_wrapper(env)
    env = gym.wrappers.RecordEpisodeStatistics(env)  # the game's own score, below every change
    if observation_keys:
        env = filtered_observations(env, env_id, observation_keys)
    if isinstance(env.observation_space, gym.spaces.Discrete):  # a state index, one-hot encoded as SB3 does
        env = one_hot_observations(env)
    if not preprocess:
        return wrapped(env, wrapper)
    if len(env.observation_space.shape) != 3 or not is_atari(env_id):
        raise ValueError(
            f'--preprocess expects an Atari environment, got {env_id} with observations of '
            f'shape {env.observation_space.shape}'
        )
    env = gym.wrappers.AtariPreprocessing(env, noop_max=noop_max, frame_skip=4 if max_frame else 1, screen_size=84)
    if terminal_on_life_loss is not False:
        env = EpisodicLife(env)
    if fire_reset is not False and needs_fire(env):
        env = FireReset(env)
    if clip_rewards is not False:
        env = gym.wrappers.TransformReward(env, np.sign)
    return wrapped(ChannelsLast(gym.wrappers.FrameStackObservation(env, frame_stack)), wrapper)


def wrapped(env: gym.Env, wrapper: str | Callable[[gym.Env], gym.Env] | None) -> gym.Env:
    """``env`` wrapped by the user's ``wrapper`` (a function, or its ``module:name``), checked to give back an env."""
    if wrapper is None:
        return env
    function = wrapper_function(wrapper)
    result = function(env)
    if not isinstance(result, gym.Env):
        raise ValueError(f'expected wrapper {wrapper_name(wrapper)} to return a gymnasium Env, got '
                         f'{type(result).__name__}')
    return result


def wrapper_function(wrapper: str | Callable[[gym.Env], gym.Env]) -> Callable[[gym.Env], gym.Env]:
    """The function a ``wrapper`` names: itself, or ``module:name`` imported (a user's module, as ``--env
    module:ID`` imports it), refused in one line where nothing importable has that name."""
    if callable(wrapper):
        return wrapper
    if isinstance(wrapper, str) and wrapper.startswith('<'):  # what a save records of a function it cannot name
        raise ValueError(f'the envs were wrapped by {wrapper[1:-1]}, which a save cannot record nor a worker import (a '
                         'lambda, a local function or a partial has no module:name): pass the wrapper again (load(..., '
                         'wrapper=fn), --wrapper module:name), or define it at module level')
    module, colon, name = str(wrapper).partition(':')
    if not colon or not module or not name:
        raise ValueError(f'expected wrapper as module:name (a function gym.Env -> gym.Env), got {wrapper!r}')
    try:
        target = importlib.import_module(module)
    except Exception as error:  # a user's module: any error in it is theirs to fix
        raise ValueError(f'cannot import {module!r} for wrapper {wrapper}: {type(error).__name__}: {error}') from None
    for part in name.split('.'):
        if not hasattr(target, part):
            script = ' (a script\'s functions cannot be imported from elsewhere: put it in a module)' if (
                module == '__main__') else ''
            raise ValueError(f'{module} has no {name} for wrapper {wrapper}{script}')
        target = getattr(target, part)
    if not callable(target):
        raise ValueError(f'expected wrapper {wrapper} to be a function gym.Env -> gym.Env, got {type(target).__name__}')
    return target


def wrapper_name(wrapper: str | Callable[[gym.Env], gym.Env]) -> str:
    """How files record ``wrapper``: ``module:name``, where importing that gives the same function back; else its
    description in angle brackets, which :func:`wrapper_function` refuses with what to do."""
    if isinstance(wrapper, str):
        return wrapper
    name = f'{getattr(wrapper, "__module__", None)}:{getattr(wrapper, "__qualname__", None)}'
    try:
        if wrapper_function(name) is wrapper:
            return name
    except ValueError:
        pass
    return f'<{getattr(wrapper, "__qualname__", None) or repr(wrapper)}>'


# Keyword arguments of gym.make itself that take numbers, as the validation rules name them.
MAKE_NUMBERS = {'max_episode_steps': 'int'}


def check_env_kwargs(env_id: str, env_kwargs: dict | None) -> None:
    """Refuse, naming it and the env, an env kwarg given as text where the env takes a number or a boolean (its
    default, registered value or annotation says which): the env would take it and fail deep inside, often only at
    its first step, or, for a boolean, read any text as true."""
    if not env_kwargs:
        return
    spec = env_spec(env_id)
    try:
        creator = spec.entry_point
        creator = gym.envs.registration.load_env_creator(creator) if isinstance(creator, str) else creator
        parameters = dict(inspect.signature(creator).parameters)
    except Exception:  # an entry point that cannot be inspected: gym.make reports what it refuses
        parameters = {}
    for name, value in dict(env_kwargs).items():  # (pairs, from the command line)
        if name in MAKE_NUMBERS:
            try:
                check_value(name, value, MAKE_NUMBERS[name])
            except ValueError as error:
                raise ValueError(f'{env_id} env_kwargs: {error}') from None
            continue
        if not isinstance(value, str):
            continue
        parameter = parameters.get(name, inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY))
        sample = spec.kwargs.get(name, parameter.default)
        annotation = getattr(parameter.annotation, '__name__', str(parameter.annotation))
        words = set(annotation.replace('|', ' ').replace('[', ' ').replace(']', ' ').split())
        kind = 'bool' if isinstance(sample, bool) else 'number' if isinstance(sample, (int, float)) else None
        if kind is None and 'str' not in words:
            kind = 'bool' if 'bool' in words else 'number' if words & {'int', 'float'} else None
        if kind is not None:
            shown = f' (default {sample!r})' if isinstance(sample, (int, float)) else ''
            raise ValueError(f'{env_id} env_kwargs: expected {name} to be '
                             f'{"true or false" if kind == "bool" else "a number"}{shown}, got the text {value!r}')


@validated
def create_envs(
    env_id: str,
    n_envs: int = 1,
    seed: int | None = None,
    preprocess: bool | None = None,
    max_frame: bool = True,
    clip_rewards: bool | None = None,
    terminal_on_life_loss: bool | None = None,
    fire_reset: bool | None = None,
    noop_max: int = 30,
    async_envs: bool = False,
    ale_vector: bool | None = None,
    env_kwargs: dict | None = None,
    observation_keys: Sequence[str] | None = None,
    wrapper: str | Callable[[gym.Env], gym.Env] | None = None,
) -> gym.vector.VectorEnv:
    """Create ``n_envs`` copies of ``env_id`` as one Gymnasium vector env.

    Args:
        env_id: A registered Gymnasium id, e.g. ``CartPole-v1`` or ``PongNoFrameskip-v4``.
        n_envs: Number of environments stepped together.
        seed: Seeds env ``i`` with ``seed + i`` on the first reset, and the action space.
        preprocess: Atari preprocessing (default: on for ALE ids, off for others).
        max_frame: Max-pool the last two of the skipped frames while preprocessing.
        clip_rewards: With preprocessing, the learner sees rewards clipped to their sign (default: on);
            reported scores stay the game's.
        terminal_on_life_loss: With preprocessing, a lost life ends the learner's episode (default: on);
            reported episodes stay whole games.
        fire_reset: With preprocessing, press FIRE after each reset in games that need it (default: on).
        noop_max: With preprocessing, play up to this many no-op actions (a random count) after each reset.
        async_envs: Step the envs in subprocesses (worth it for heavy envs other than Atari).
        ale_vector: Step preprocessed Atari games in ale-py's C++ vector env, about twice as fast (default: on for
            ALE ids unless async_envs; off: Gymnasium's vector env with Python wrappers). See
            :mod:`xagents.envs.ale_vector` for the ways it differs.
        env_kwargs: Keyword arguments of ``gym.make`` (e.g. ``continuous=True``), given as key=value.
        observation_keys: Keep only these keys of a Dict observation (e.g. MiniGrid's image and direction,
            without its mission text).
        wrapper: Wrap every env, evaluation's and play's too, with this function gym.Env -> gym.Env, last (the
            agent sees what it gives; scores stay the game's): Stable-Baselines3's wrapper_class. A module:name
            (my_wrappers:scaled, a module of the working directory or an installed one) names one, as a save
            records it.
    """
    env_spec(env_id)
    check_env_kwargs(env_id, env_kwargs)
    if wrapper is not None:
        wrapper_function(wrapper)  # a name that imports nothing is refused before any env is made
    settings = {'env_id': env_id, 'preprocess': preprocess, 'max_frame': max_frame,
                'clip_rewards': clip_rewards, 'terminal_on_life_loss': terminal_on_life_loss,
                'fire_reset': fire_reset, 'noop_max': noop_max, 'env_kwargs': dict(env_kwargs) if env_kwargs else None,
                **({'observation_keys': list(observation_keys)} if observation_keys else {}),
                **({'wrapper': wrapper} if wrapper is not None else {})}
    make = functools.partial(make_env, **settings)
    if n_envs > 64:  # what one env allocates (its modules already loaded), times n_envs, before making them all
        make().close()
        tracemalloc.start()
        make().close()
        one = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        if is_atari(env_id):  # its emulator lives in C++, which tracemalloc does not see (the Python part is in it)
            one = max(one, ALE_GAME_BYTES)
        check_fits(f'{n_envs:,} {env_id} envs', n_envs * one, 'use fewer envs (--n-envs, --eval-episodes)')
    if ale_vector and async_envs:
        raise ValueError('ale_vector steps the games in its own threads: leave async_envs off with it')
    ale = None if ale_vector is False or async_envs else ale_vector_settings(settings, ale_vector)
    if ale is not None:
        envs = AleVectorEnv(env_spec(env_id), n_envs, **ale)
    elif async_envs:
        envs = OrderlyAsyncVectorEnv([functools.partial(_without_interrupts, make, os.getpid())] * n_envs,
                                     autoreset_mode=AUTORESET_MODE)
    else:
        envs = gym.vector.SyncVectorEnv([make] * n_envs, autoreset_mode=AUTORESET_MODE)
    # Enough to make more envs like these (deterministic evaluation, play).
    envs.metadata['xagents'] = settings
    if seed is not None:
        envs.action_space.seed(seed)
    return envs


def ale_vector_settings(settings: dict, asked: bool | None) -> dict | None:
    """:class:`AleVectorEnv` arguments for the ``make_env`` ``settings``, or None where it cannot give what they ask
    (not an Atari id, no preprocessing, observation keys or env kwargs other than ``max_episode_steps``): asked for
    (``asked``), that is refused in one line."""
    env_id, kwargs = settings['env_id'], dict(settings.get('env_kwargs') or {})
    frames = kwargs.pop('max_episode_steps', None)  # counted in emulator frames, below the frame skip
    reason = ('it steps ALE ids only' if not is_atari(env_id) else
              'it preprocesses every game' if settings.get('preprocess') is False else
              'it takes no observation_keys' if settings.get('observation_keys') else
              'it takes no wrapper' if settings.get('wrapper') is not None else
              f'it takes no env_kwargs {", ".join(kwargs)}' if kwargs else None)
    if reason is not None:
        if asked:
            raise ValueError(f'ale_vector cannot step {env_id}: {reason} (leave --ale-vector off)')
        return None
    return {'max_frame': settings['max_frame'], 'clip_rewards': settings.get('clip_rewards') is not False,
            'terminal_on_life_loss': settings.get('terminal_on_life_loss') is not False,
            'fire_reset': settings.get('fire_reset') is not False, 'noop_max': settings.get('noop_max', 30),
            'max_episode_frames': frames}


def _without_interrupts(make: Callable[[], gym.Env], learner: int) -> gym.Env:
    """Make an env in an ``AsyncVectorEnv`` worker process that ignores Ctrl-C: a terminal sends SIGINT to
    every process of the group, and the learner stops the run and closes its workers in order. SIGTERM, which
    the learner turns into a stop in order for itself, ends a worker quietly again (it is how a close that
    cannot wait stops them). (The learner makes one env too, for the spaces: its own signals stay.)"""
    if os.getpid() != learner:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    return make()


class OrderlyAsyncVectorEnv(gym.vector.AsyncVectorEnv):
    """Gymnasium's ``AsyncVectorEnv`` whose calls reach every worker or none: Ctrl-C or SIGTERM (a stop in order)
    while a step, reset or call is being sent waits until every worker has its command. Landing between two workers,
    it would leave one worker's answer unread and unawaited, which ``close`` would read as that worker's
    "closed", and the worker's own answer would then find the pipe shut (a traceback on the terminal)."""

    def step_async(self, actions) -> None:
        with interrupts_deferred():
            super().step_async(actions)

    def reset_async(self, seed=None, options=None) -> None:
        with interrupts_deferred():
            super().reset_async(seed=seed, options=options)

    def call_async(self, name: str, *args, **kwargs) -> None:
        with interrupts_deferred():
            super().call_async(name, *args, **kwargs)


PENDING_CALL_TIMEOUT = 5.0  # seconds a closing async env waits for a step or reset still running in its workers


def close_envs(envs: gym.vector.VectorEnv) -> None:
    """Close envs wherever a run stopped. Ctrl-C inside an async step may land after the workers' answers were
    read, and Gymnasium's ``close`` would then wait for them forever: it waits a few seconds, then stops the
    workers."""
    if not isinstance(envs, gym.vector.AsyncVectorEnv):
        envs.close()
        return
    with warnings.catch_warnings():
        warnings.filterwarnings('ignore', message='.*Calling `close` while waiting for a pending call')
        envs.close(timeout=PENDING_CALL_TIMEOUT)


ENV_PARAMETERS = tuple(name for name in inspect.signature(create_envs).parameters if name not in ('env_id', 'seed'))


def as_vector_env(env: gym.Env | gym.vector.VectorEnv) -> gym.vector.VectorEnv:
    """A user's env as agents take it: a ``gym.Env`` becomes a one-env vector env; a vector env must
    reset its episodes in the step that ends them (Gymnasium's ``SAME_STEP``), or the learner would
    pair an episode's last observation with the next one's first."""
    if isinstance(env, gym.vector.VectorEnv):
        mode = env.metadata.get('autoreset_mode')
        if mode is not None and mode != AUTORESET_MODE:
            raise ValueError(
                f'expected a vector env with autoreset_mode SAME_STEP, got {getattr(mode, "name", mode)}: make it '
                "with gym.make_vec(..., vectorization_mode='sync', vector_kwargs={'autoreset_mode': "
                "gym.vector.AutoresetMode.SAME_STEP}), "
                'or pass an env id or a gym.Env'
            )
        return env
    if isinstance(env, gym.Env):
        env = CheckedEnvData(env)  # a wrong shape, a state out of range or a bad mask named, not NumPy's words
        if isinstance(env.observation_space, gym.spaces.Discrete):
            env = one_hot_observations(env)
        return gym.vector.SyncVectorEnv([lambda: env], autoreset_mode=AUTORESET_MODE)
    hint = ''
    if isinstance(env, str):
        hint = (": agents take the env first and build their networks from .cfg files: PPO(env), not PPO('MlpPolicy', "
                'env)' if env.endswith('Policy') else ": build from an id with from_env, e.g. PPO.from_env('CartPole-v1')")
    raise ValueError(f'expected a gymnasium Env or VectorEnv, got {type(env).__name__}{hint}')


def env_settings(envs: gym.vector.VectorEnv) -> dict | None:
    """The ``make_env`` arguments of envs made by :func:`create_envs` (None for other vector envs)."""
    return envs.metadata.get('xagents')


def vector_settings(envs: gym.vector.VectorEnv) -> dict | None:
    """:func:`create_envs` arguments that make envs like ``envs`` again (saves, workers), or None for envs not made
    there; a wrapper by its ``module:name`` (see :func:`wrapper_name`)."""
    settings = env_settings(envs)
    wrapper = {'wrapper': wrapper_name(settings['wrapper'])} if settings and 'wrapper' in settings else {}
    return settings and {**settings, 'n_envs': envs.num_envs, 'async_envs': isinstance(envs, gym.vector.AsyncVectorEnv),
                         'ale_vector': isinstance(envs, AleVectorEnv), **wrapper}


def settings_for(envs: gym.vector.VectorEnv, env_id: str | None = None) -> dict:
    """``make_env`` arguments for more envs like ``envs`` (evaluation, play), on ``env_id`` if given.

    Raises:
        ValueError: no ``env_id`` is given and ``envs`` were not made from one.
    """
    settings = dict(env_settings(envs) or {})
    settings['env_id'] = env_id or settings.get('env_id')
    if not settings['env_id']:
        raise ValueError("expected an env to play on: the agent's envs were not made from an id, so pass one "
                         "(evaluate(agent, env), agent.play(env_id=...))")
    return settings


def frame_stacked(envs: gym.vector.VectorEnv) -> bool:
    """Whether observations are preprocessed Atari frame stacks (replay stores them one frame each)."""
    settings = env_settings(envs) or {}
    preprocess = settings.get('preprocess')
    if preprocess is None and 'env_id' in settings:
        preprocess = is_atari(settings['env_id'])
    space = envs.single_observation_space
    return bool(preprocess) and space.shape is not None and len(space.shape) == 3 and space.dtype == np.uint8


class EpisodeScores:
    """The episodes a vector env finishes, each scored as its game scores it.

    Envs made by :func:`create_envs` record every episode below their wrappers, so an episode is
    a whole game with unclipped rewards (a lost life that ended the learner's episode is not
    one). Vector envs made elsewhere are scored by summing the rewards they return until each
    ``terminated`` or ``truncated``.
    """

    def __init__(self, envs: gym.vector.VectorEnv) -> None:
        self.recorded = env_settings(envs) is not None
        self.returns = np.zeros(envs.num_envs)
        self.lengths = np.zeros(envs.num_envs, np.int64)

    def update(self, rewards: np.ndarray, dones: np.ndarray, info: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Take one vector step's results; return ``(envs, returns, lengths)`` of the episodes it finished."""
        if self.recorded:
            if not dones.any() or 'episode' not in info.get('final_info', {}):
                return NO_EPISODES
            final = info['final_info']
            ended = np.flatnonzero(final['_episode'] & dones)
            return (ended, np.asarray(final['episode']['r'], np.float64)[ended],
                    np.asarray(final['episode']['l'], np.int64)[ended])
        self.returns += rewards
        self.lengths += 1
        if not dones.any():
            return NO_EPISODES
        return self.cut(dones)

    def cut(self, envs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """End the episodes of the ``envs`` (a mask) as they stand (envs not made here): ``(envs, returns, lengths)``."""
        ended = np.flatnonzero(envs)
        returns, lengths = self.returns[ended], self.lengths[ended]
        self.returns[ended], self.lengths[ended] = 0, 0
        return ended, returns, lengths
