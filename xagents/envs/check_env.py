"""Check an environment before training on it, as Stable-Baselines3's ``check_env`` does, plus what xagents
adds: which agents take its spaces and whether it offers action masks. Nothing here imports TensorFlow::

    from xagents import check_env

    result = check_env('CartPole-v1')
    print(result.report())
    assert result.ok, result.errors

The same from a shell: ``xagents check-env CartPole-v1`` (exit status 1 when the env breaks Gymnasium's API).
"""
from __future__ import annotations

import dataclasses
import numbers
from typing import Any

import gymnasium as gym
import numpy as np

from xagents.envs.masks import (INFO_SOURCE, MASK_KEY, MASK_METHOD, METHOD_SOURCE, MaskError, as_mask, check_masks,
                                 mask_segments, mask_size, random_valid)
from xagents.envs.goal_envs import check_goal_space
from xagents.envs.observations import NATURE_CNN_SMALLEST, check_observation_space, is_grid, is_image, is_pixels
from xagents.envs.spaces import ACTION_SPACE_AGENTS, empty_dimension, one_line

AGENTS = ('PPO', 'A2C', 'TRPO', 'ACER', 'DQN', 'QRDQN', 'DDPG', 'TD3', 'SAC', 'TQC', 'CrossQ')
OFF_POLICY_BOX = ('DDPG', 'TD3', 'SAC', 'TQC', 'CrossQ')  # scale their [-1, 1] actions to the Box's bounds
MASKING_AGENTS = ('PPO', 'A2C', 'TRPO', 'DQN', 'QRDQN', 'SAC')  # act within masks (those of them that take the actions)
UNBOUNDED = 1e30  # a bound this large (float32's maximum, as CartPole's) stands for no bound
INTENSITIES = 64  # a small image whose values reach this holds intensities rather than ids (MiniGrid's reach 10)
WIDE = 100.0  # vector observations spanning more than this are badly scaled for a network


@dataclasses.dataclass
class CheckResult:
    """What :func:`check_env` found: the spaces, the agents that take them, the masks, and the problems.

    ``warnings`` are things that train badly or not at all with some agents (each with a hint); ``errors``
    are breaks of Gymnasium's API that stop training. ``ok`` is True without errors.
    """

    env: str
    observation_space: gym.Space | None = None
    action_space: gym.Space | None = None
    agents: tuple[str, ...] = ()
    masks: str | None = None  # how the env offers action masks, or None
    steps: int = 0  # random steps taken
    goal_env: bool = False  # it has compute_reward and goal observations, what --her takes
    notes: list[str] = dataclasses.field(default_factory=list)
    warnings: list[str] = dataclasses.field(default_factory=list)
    errors: list[str] = dataclasses.field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors

    def report(self) -> str:
        """The findings as a short text: one line each, problems as ``warning: ...`` and ``error: ...``."""
        lines = [f'env: {self.env}',
                 f'observations: {one_line(self.observation_space) if self.observation_space is not None else "?"}',
                 f'actions: {one_line(self.action_space) if self.action_space is not None else "?"}',
                 f'agents: {" ".join(self.agents) if self.agents else "none"}',
                 f'action masks: {self.masks or "none"}',
                 f'random steps: {self.steps}']
        lines += [f'note: {note}' for note in self.notes]
        lines += [f'warning: {warning}' for warning in self.warnings]
        lines += [f'error: {error}' for error in self.errors]
        lines.append('ok' if self.ok else f'{len(self.errors)} error(s)')
        return '\n'.join(lines)


class _Broken(Exception):
    """The env broke the API: the check stops there (the message is in the result's errors)."""


def check_env(env: gym.Env | str, env_kwargs: dict | None = None, observation_keys: list[str] | None = None,
              steps: int = 100, seed: int = 0) -> CheckResult:
    """Check ``env`` (an env, or an id to make with ``env_kwargs``; ``observation_keys`` keeps these keys of Dict
    observations, as agents' ``observation_keys`` does) for xagents: its spaces and which agents take
    them, its action masks (``action_masks()`` or ``info['action_mask']``), spaces that train badly (unbounded or
    badly scaled Box observations, images that are not uint8, Box actions far from [-1, 1]), then ``steps``
    random actions (valid ones when it masks) checking what ``reset`` and ``step`` return, and that
    ``reset(seed=seed)`` twice gives the same observation.

    Returns:
        A :class:`CheckResult`; nothing is printed (``result.report()`` is the text ``xagents check-env``
        prints).

    Raises:
        ValueError: an unknown id, or making the env failed.
    """
    if isinstance(env, str):
        from xagents.envs.creation import env_spec

        env_id = env
        env_spec(env_id)
        try:
            env = gym.make(env_id, disable_env_checker=True, **(env_kwargs or {}))
        except Exception as error:
            given = f' with env_kwargs {env_kwargs}' if env_kwargs else ''
            raise ValueError(f'making {env_id}{given} failed: {type(error).__name__}: {error}') from None
        owned = True
        if observation_keys:
            from xagents.envs.creation import filtered_observations

            try:
                env = filtered_observations(env, env_id, observation_keys)
            except ValueError:
                env.close()
                raise
    else:
        if not isinstance(env, gym.Env):
            raise ValueError(f'expected a gymnasium Env or an env id, got {type(env).__name__}')
        env_id, owned = env.spec.id if env.spec else type(env.unwrapped).__name__, False
    # An env without a space of its own: gymnasium.Env declares them without values (AttributeError).
    result = CheckResult(env_id, getattr(env, 'observation_space', None), getattr(env, 'action_space', None))
    try:
        spaces(result)
        goal_env(env, result)
        try:
            if isinstance(result.observation_space, gym.Space) and isinstance(result.action_space, gym.Space):
                run(env, result, steps, seed)
        except _Broken:
            pass
    finally:
        if owned:
            env.close()
    return result


# ------------------------------------------------------------------------------------------------ spaces
def spaces(result: CheckResult) -> None:
    observations, actions = result.observation_space, result.action_space
    observation_ok = True
    if observations is None:
        result.errors.append('the env has no observation_space: set self.observation_space to a gymnasium space '
                             '(gymnasium.spaces.Box...) in its __init__')
        observation_ok = False
    elif not isinstance(observations, gym.Space):
        result.errors.append(f'observation_space is {type(observations).__name__}, not a gymnasium Space')
        observation_ok = False
    else:
        try:
            check_observation_space(gym.spaces.Box(0, 1, (observations.n,)) if isinstance(
                observations, gym.spaces.Discrete) else observations, 'xagents')
        except ValueError as error:
            result.warnings.append('no agent takes these observations: ' + str(error).replace(
                'xagents expects', 'agents expect').replace('xagents encodes', 'agents encode'))
            observation_ok = False
    if isinstance(observations, gym.spaces.Discrete):
        result.notes.append('Discrete observations are one-hot encoded (envs made from an id by create_envs, the '
                            'command line)')
    if actions is None:
        result.errors.append('the env has no action_space: set self.action_space to a gymnasium space '
                             '(gymnasium.spaces.Discrete, Box...) in its __init__')
        return
    if not isinstance(actions, gym.Space):
        result.errors.append(f'action_space is {type(actions).__name__}, not a gymnasium Space')
        return
    takers = list(ACTION_SPACE_AGENTS.get(type(actions).__name__, ()))
    if empty_dimension(actions):  # the agents' own refusal
        result.errors.append(f'no agent can act in this action space: {empty_dimension(actions)}')
        takers = []
    elif not takers:
        result.warnings.append(f'no agent takes {type(actions).__name__} actions (agents take '
                               f'{", ".join(ACTION_SPACE_AGENTS)})')
    if isinstance(actions, gym.spaces.Box):
        box_actions(actions, takers, result)
    result.agents = tuple(agent for agent in AGENTS if agent in takers) if observation_ok else ()
    if isinstance(observations, gym.spaces.Dict):
        for key, sub in observations.spaces.items():
            box_observations(sub, result, f' under {key!r}')
    else:
        box_observations(observations, result)


def box_observations(space: gym.Space, result: CheckResult, where: str = '') -> None:
    if not isinstance(space, gym.spaces.Box):
        return
    if len(space.shape) == 3 and not is_image(space) and not is_grid(space):
        result.warnings.append(
            f'observations{where} look like images ({space.shape}, {space.dtype}, in [{np.min(space.low)}, '
            f'{np.max(space.high)}]) but are not uint8 in [0, 255] height x width x channels: agents flatten them '
            f'into dense layers and normalise them; as images (CNN defaults, raw 0..255) make them uint8 channels-last')
    if is_pixels(space):
        result.notes.append(f'observations{where} are pictures (uint8 images of at least {NATURE_CNN_SMALLEST} x '
                            f'{NATURE_CNN_SMALLEST}): the Nature CNN on values scaled to [0, 1], never normalised')
    elif is_grid(space):
        result.notes.append(f'observations{where} are a grid of values ({space.shape} uint8, {grid_why(space)}): '
                            f'flattened, its values as they are, normalised by default (--normalize-observations)')
    if is_image(space) or is_grid(space) or not np.issubdtype(space.dtype, np.floating):
        return
    low, high = np.asarray(space.low, np.float64), np.asarray(space.high, np.float64)
    unbounded = ~np.isfinite(low) | ~np.isfinite(high) | (np.abs(low) >= UNBOUNDED) | (np.abs(high) >= UNBOUNDED)
    if unbounded.any():
        result.warnings.append(
            f'observations{where} are unbounded in {int(unbounded.sum())} of {unbounded.size} entries: their scale is '
            f'unknown; train with normalize_observations=True (--normalize-observations) if they are not already '
            f'about [-1, 1]')
    elif np.any(high - low > WIDE):
        result.warnings.append(
            f'observations{where} are badly scaled (bounds up to [{low.min():g}, {high.max():g}]): train with '
            f'normalize_observations=True (--normalize-observations) or scale them to about [-1, 1]')


def grid_why(space: gym.spaces.Box) -> str:
    return f'at most {int(np.max(space.high))}' if np.all(space.high < 255) else 'too small for the Nature CNN'


def box_actions(space: gym.spaces.Box, takers: list[str], result: CheckResult) -> None:
    low, high = np.asarray(space.low, np.float64), np.asarray(space.high, np.float64)
    if space.dtype != np.float32:  # Stable-Baselines3 warns too
        result.warnings.append(f'Box actions are {space.dtype}: agents act in float32 and the env gets float32 '
                               f'arrays; declare the action space with dtype=np.float32')
    if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high))):
        for agent in OFF_POLICY_BOX:
            if agent in takers:
                takers.remove(agent)
        result.errors.append('Box actions are unbounded (inf in low or high): DDPG, TD3 and SAC refuse them (they '
                             'scale [-1, 1] to the bounds; Stable-Baselines3 refuses them too); PPO, A2C and TRPO '
                             'would sample unclipped Gaussian actions; bound the space, e.g. to [-1, 1]')
        return
    if np.all(low == -1) and np.all(high == 1):
        return
    result.notes.append(f'Box actions in [{low.min():g}, {high.max():g}], not [-1, 1]: DDPG, TD3 and SAC act in '
                        f'[-1, 1] and rescale to the bounds themselves')
    if not np.allclose(low, -high) or np.any(high - low > 20) or np.any(high - low < 0.2):
        result.warnings.append(
            'Box actions far from symmetric [-1, 1]: PPO, A2C and TRPO sample Gaussian actions around 0 with '
            'standard deviation 1 and clip them to the bounds; rescale the space '
            '(gymnasium.wrappers.RescaleAction(env, -1, 1))')


def goal_env(env: gym.Env, result: CheckResult) -> None:
    """Note a goal env (one with ``compute_reward``, as Stable-Baselines3 tells them) whose observations hindsight
    replay takes, so that the random steps check its rewards; warn of one whose observations it does not take."""
    if not callable(getattr(env.unwrapped, 'compute_reward', None)) or not isinstance(result.observation_space,
                                                                                       gym.Space):
        return
    try:
        check_goal_space(result.observation_space)
    except ValueError as error:
        result.warnings.append(f'the env has a compute_reward method, as goal envs do, and {error}: --her refuses it '
                               f'(rename compute_reward if this is no goal env)')
        return
    result.goal_env = True
    result.notes.append('a goal env: --her (DQN, QR-DQN, DDPG, TD3, SAC, TQC, CrossQ) relabels goals with its compute_reward, checked '
                        'here against the step rewards')


def check_goal_reward(env: gym.Env, observation: dict, reward: float, info: dict, result: CheckResult) -> None:
    """Stable-Baselines3's goal-env checks: the step's reward is ``compute_reward(achieved_goal, desired_goal,
    info)``, and ``compute_reward`` is vectorised (a batch of goal pairs in, a reward each out), as hindsight
    relabelling calls it on batches beside the stored rewards."""
    compute = env.unwrapped.compute_reward
    achieved, desired = np.asarray(observation['achieved_goal']), np.asarray(observation['desired_goal'])
    single = call(result, 'compute_reward', compute, achieved, desired, info)
    try:
        value = float(np.asarray(single, np.float64).reshape(()))
    except (TypeError, ValueError):
        fail(result, f'compute_reward(achieved_goal, desired_goal, info) of one goal pair returned '
                     f'{describe(single)}: expected a number')
    if not np.isfinite(value):
        fail(result, f'compute_reward(achieved_goal, desired_goal, info) returned {value} for achieved_goal '
                     f'{achieved.tolist()} and desired_goal {desired.tolist()}')
    if not np.isclose(value, reward, rtol=1e-6, atol=1e-6):
        fail(result, f'step returned a reward of {reward:g} where compute_reward(achieved_goal, desired_goal, info) '
                     f'gives {value:g}: with --her a batch would mix step rewards and compute_reward ones; return '
                     f"compute_reward's value from step")
    batch = call(result, 'compute_reward', compute, np.stack([achieved, achieved]), np.stack([desired, desired]),
                 [info, info])
    rewards = np.asarray(batch)
    if rewards.shape not in ((2,), (2, 1)) or rewards.dtype.kind not in 'biuf' or not np.allclose(rewards, value):
        fail(result, f'compute_reward is not vectorised: 2 goal pairs (goals shaped {(2, *achieved.shape)}) gave '
                     f'{describe(batch)}, expected 2 rewards of {value:g}, as one pair gives; --her calls it on '
                     f'batches of goal pairs')


# -------------------------------------------------------------------------------------------- random steps
def run(env: gym.Env, result: CheckResult, steps: int, seed: int) -> None:
    observation_space, action_space = result.observation_space, result.action_space
    first = call(result, 'reset(seed=...)', env.reset, seed=seed)
    observation, info = reset_result(first, result)
    again, _ = reset_result(call(result, 'reset(seed=...)', env.reset, seed=seed), result)
    if not same(observation, again):
        result.warnings.append(f'reset(seed={seed}) twice gave different observations: the env ignores its seed '
                               '(seed its random generator with super().reset(seed=seed) and use self.np_random), '
                               'so runs cannot be repeated')
    check_observation(observation, observation_space, result, 'reset')
    seen = seen_in_grids(observation, observation_space, {})
    has_method = env.has_wrapper_attr(MASK_METHOD)
    masks = read_masks(env, info, has_method, result, 'reset')
    if masks is not None:
        result.masks = "action_masks()" if has_method else f"info['{MASK_KEY}']"
        size = mask_size(action_space)
        if size is None:
            result.warnings.append(f'the env offers action masks but agents mask Discrete and MultiDiscrete actions '
                                   f'only: they ignore these ({type(action_space).__name__} actions)')
        else:
            result.notes.append(f'{", ".join(a for a in MASKING_AGENTS if a in result.agents)} act within the masks '
                                f'(--no-action-masks to compare)')
    rng = np.random.default_rng(seed)
    action_space.seed(seed)
    segments = mask_segments(action_space)
    for _ in range(steps):
        if masks is not None and segments is not None and not check_masks(masks[None], 1, segments):
            choices = random_valid(rng, masks[None], segments)[0]
            action = (action_space.start + int(choices[0]) if isinstance(action_space, gym.spaces.Discrete)
                      else action_space.start + choices.reshape(action_space.shape))
        else:
            action = action_space.sample()
        returned = call(result, 'step', env.step, action)
        result.steps += 1
        if not isinstance(returned, tuple) or len(returned) != 5:
            fail(result, f'step returned {describe(returned)}: expected a tuple (observation, reward, terminated, '
                         'truncated, info)')
        observation, reward, terminated, truncated, info = returned
        check_observation(observation, observation_space, result, 'step')
        seen = seen_in_grids(observation, observation_space, seen)
        if isinstance(reward, np.ndarray) and reward.shape == ():
            reward = reward.item()
        if not isinstance(reward, numbers.Real) or isinstance(reward, bool):
            fail(result, f'step returned a reward of {describe(reward)}: expected a float')
        if not np.isfinite(reward):
            fail(result, f'step returned a non-finite reward ({reward})')
        for name, value in (('terminated', terminated), ('truncated', truncated)):
            if not isinstance(value, (bool, np.bool_)):
                fail(result, f'step returned {name} as {describe(value)}: expected a bool')
        if not isinstance(info, dict):
            fail(result, f'step returned info as {describe(info)}: expected a dict')
        if result.goal_env:
            check_goal_reward(env, observation, reward, info, result)
        masks = read_masks(env, info, has_method, result, 'step') if result.masks else None
        if terminated or truncated:
            observation, info = reset_result(call(result, 'reset', env.reset), result)
            check_observation(observation, observation_space, result, 'reset')
    for where, most in seen.items():
        if most >= INTENSITIES:
            result.notes.append(f'observations{where} are read as a grid, but values up to {most} came: if '
                                f'they are intensities (a small camera), read them as pictures with --wrapper '
                                f'xagents.envs.observations:SmallPictures (wrapper=SmallPictures)')
            masks = read_masks(env, info, has_method, result, 'reset') if result.masks else None


def seen_in_grids(observation: Any, space: gym.Space, seen: dict[str, int]) -> dict[str, int]:
    """``seen`` with the largest value of each small [0, 255] grid in ``observation`` (keyed by where it is)."""
    parts = space.spaces.items() if isinstance(space, gym.spaces.Dict) else [(None, space)]
    for key, sub in parts:
        if is_grid(sub) and is_image(sub):
            value = observation.get(key) if key is not None else observation
            where = '' if key is None else f' under {key!r}'
            seen[where] = max(seen.get(where, 0), int(np.max(value)))
    return seen


def call(result: CheckResult, name: str, function, *args, **kwargs) -> Any:
    try:
        return function(*args, **kwargs)
    except Exception as error:
        fail(result, f'{name} raised {type(error).__name__}: {error}')


def fail(result: CheckResult, error: str) -> None:
    result.errors.append(error)
    raise _Broken


def reset_result(returned: Any, result: CheckResult) -> tuple[Any, dict]:
    if not isinstance(returned, tuple) or len(returned) != 2:
        fail(result, f'reset returned {describe(returned)}: expected a tuple (observation, info)')
    if not isinstance(returned[1], dict):
        fail(result, f'reset returned info as {describe(returned[1])}: expected a dict')
    return returned


def describe(value: Any) -> str:
    if isinstance(value, tuple):
        return f'a tuple of {len(value)}'
    if isinstance(value, np.ndarray):
        return f'an array shaped {value.shape} ({value.dtype})'
    return f'{type(value).__name__} {value!r}'[:80]


def same(first: Any, second: Any) -> bool:
    if isinstance(first, dict) and isinstance(second, dict):
        return first.keys() == second.keys() and all(same(first[key], second[key]) for key in first)
    try:
        return bool(np.array_equal(np.asarray(first), np.asarray(second)))
    except Exception:
        return first == second


def check_observation(observation: Any, space: gym.Space, result: CheckResult, where: str) -> None:
    """Error when ``observation`` is not of ``space`` (its shape, its keys, its bounds); a warning when only its
    dtype differs (agents cast it), given once."""
    if isinstance(space, gym.spaces.Dict):
        if not isinstance(observation, dict):
            fail(result, f'{where} returned an observation of {describe(observation)}: expected a dict with keys '
                         f'{", ".join(space.spaces)}')
        if set(observation) != set(space.spaces):
            fail(result, f'{where} returned an observation with keys {", ".join(map(str, observation))}: the '
                         f'observation space has {", ".join(space.spaces)}')
        for key, sub in space.spaces.items():
            check_one(observation[key], sub, result, f'{where} returned an observation whose {key!r}')
        return
    check_one(observation, space, result, f'{where} returned an observation that')


def check_one(value: Any, space: gym.Space, result: CheckResult, what: str) -> None:
    if isinstance(space, gym.spaces.Box) and np.asarray(value).dtype.kind == 'f':
        array = np.asarray(value)
        if not np.isfinite(array).all():  # an unbounded Box contains infinities: agents stop at them
            fail(result, f'{what} holds {array[~np.isfinite(array)].flat[0]}: agents stop a run at a non-finite '
                         f'observation')
    if space.contains(value):
        return
    if isinstance(space, gym.spaces.Box):
        array = np.asarray(value)
        if array.shape != space.shape:
            fail(result, f'{what} is shaped {array.shape}: the observation space says {space.shape}')
        if array.dtype.kind in 'biuf' and not np.can_cast(array.dtype, space.dtype, 'same_kind'):
            fail(result, f'{what} is {array.dtype}: the observation space says {space.dtype}, and vector envs '
                         f'refuse that cast (agents fail at reset): return {space.dtype} observations, or declare '
                         f'{array.dtype} ones')
        if array.dtype != space.dtype:
            warning = f'{what} is {array.dtype}: the observation space says {space.dtype} (agents cast it)'
            if not any(w.split(' returned ', 1)[-1] == warning.split(' returned ', 1)[-1] for w in result.warnings):
                result.warnings.append(warning)
            if space.contains(array.astype(space.dtype)):
                return
        if not np.all(np.isfinite(array.astype(np.float64))):
            fail(result, f'{what} is not finite')
        fail(result, f'{what} is outside the observation space\'s bounds')
    fail(result, f'{what} is {describe(value)}, not in the observation space {one_line(space)}')


def read_masks(env: gym.Env, info: dict, has_method: bool, result: CheckResult, where: str) -> np.ndarray | None:
    """The mask of the current state, from ``action_masks()`` or ``info['action_mask']``, checked for size."""
    if has_method:
        mask = call(result, 'action_masks()', env.get_wrapper_attr(MASK_METHOD))
    elif MASK_KEY in info:
        mask = info[MASK_KEY]
    else:
        if result.masks:
            result.warnings.append(f"{where} gave no info['{MASK_KEY}'] where earlier steps did: agents then allow "
                                   f'every action')
        return None
    size = mask_size(result.action_space)
    try:  # the check agents make where masks enter: booleans or 0/1, one per action
        mask = np.asarray(mask) if size is None else as_mask(
            mask, (size,), f'{METHOD_SOURCE if has_method else INFO_SOURCE} in {where}')
    except MaskError as error:
        fail(result, str(error))
    problem = size is not None and check_masks(mask.astype(bool)[None], 1, mask_segments(result.action_space))
    if problem:
        result.warnings.append(f'{where} gave an action mask that allows no action: agents stop there ({problem})')
    return mask.astype(bool)
