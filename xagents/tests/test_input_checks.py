"""What an env (or a user) hands an agent is checked where it enters: action masks that are not one boolean (or
0/1) per action, observations of another shape or of text, Discrete values out of range, action spaces with
nothing to choose, recurrent states of another size given to an export, bf16 asked of a float32 Keras model, and
masks offered to agents that do not use them. Each is one line naming what is wrong and where it came from."""
from __future__ import annotations

import logging
import re

import gymnasium as gym
import keras
import numpy as np
import pytest

import xagents
from xagents.registry import AGENTS, agent_class
from xagents.envs.check_env import check_env
from xagents.envs.creation import AUTORESET_MODE, EnvError, create_envs
from xagents.envs.masks import MaskError, as_mask

N = 3  # actions of the mask envs
GOOD = np.array([1, 0, 1], np.int8)  # Taxi's kind: int8 0/1


class MaskEnv(gym.Env):
    """Discrete(3) actions, a mask with every reset and step: ``GOOD``, and from its own step ``at`` on, ``bad``
    (``info['action_mask']``, or ``action_masks()`` for :class:`MethodMaskEnv`). Only the envs whose index (in the
    order they were made, ``bad_envs``) is listed give ``bad``: the others' good masks come with it in one step.
    It counts the forbidden actions it is sent."""

    observation_space = gym.spaces.Box(0.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(N)
    made = 0

    def __init__(self, bad=None, at: int = 3, bad_envs: tuple[int, ...] | None = None) -> None:
        self.index, MaskEnv.made = MaskEnv.made, MaskEnv.made + 1
        self.bad, self.at, self.t = bad, at, 0
        self.bad_here = bad_envs is None or self.index in bad_envs
        self.forbidden = 0

    def mask(self):
        return self.bad if self.bad_here and self.bad is not None and self.t >= self.at else GOOD

    def info(self) -> dict:
        return {'action_mask': self.mask()}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), self.info()

    def step(self, action):
        self.forbidden += not GOOD[int(action)]
        self.t += 1
        return np.zeros(2, np.float32), float(action == 2), self.t >= 8, False, self.info()


class MethodMaskEnv(MaskEnv):
    """SB3-contrib's convention: the masks from ``action_masks()``."""

    def info(self) -> dict:
        return {}

    def action_masks(self):
        return self.mask()


class BoxMaskEnv(gym.Env):
    """Box actions with an ``info['action_mask']`` (what no agent masks)."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {'action_mask': np.ones(1, bool)}

    def step(self, action):
        return np.zeros(2, np.float32), 0.0, False, False, {'action_mask': np.ones(1, bool)}


class BinaryMaskEnv(BoxMaskEnv):
    action_space = gym.spaces.MultiBinary(2)


class ObservationEnv(gym.Env):
    """Box(3,) observations, or a Dict of a position and a Discrete(4) direction (``kind='dict'``), or a Discrete(4)
    state (``kind='discrete'``, FrozenLake's kind); from its own step ``at`` on (0: the reset's too) the
    observation (the direction, for a Dict) is ``bad``."""

    action_space = gym.spaces.Discrete(2)

    def __init__(self, bad=None, at: int = 3, kind: str = 'box') -> None:
        self.kind, self.bad, self.at, self.t = kind, bad, at, 0
        self.observation_space = {
            'box': gym.spaces.Box(-1.0, 1.0, (3,), np.float32),
            'dict': gym.spaces.Dict({'direction': gym.spaces.Discrete(4),
                                     'position': gym.spaces.Box(-1.0, 1.0, (2,), np.float32)}),
            'discrete': gym.spaces.Discrete(4)}[kind]

    def observation(self):
        broken = self.t >= self.at
        if self.kind == 'dict':
            return {'direction': self.bad if broken else 1, 'position': np.zeros(2, np.float32)}
        if self.kind == 'discrete':
            return self.bad if broken else 1
        return self.bad if broken else np.zeros(3, np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self.observation(), {}

    def step(self, action):
        self.t += 1
        return self.observation(), 1.0, self.t >= 8, False, {}


class SpaceEnv(gym.Env):
    observation_space = gym.spaces.Box(0.0, 1.0, (2,), np.float32)

    def __init__(self, action_space: gym.Space) -> None:
        self.action_space = action_space

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        return np.zeros(2, np.float32), 0.0, False, False, {}


for _id, _entry in (('InputMask-v0', MaskEnv), ('InputMaskMethod-v0', MethodMaskEnv),
                    ('InputBoxMask-v0', BoxMaskEnv), ('InputBinaryMask-v0', BinaryMaskEnv),
                    ('InputObservation-v0', ObservationEnv)):
    if _id not in gym.registry:
        gym.register(_id, entry_point=_entry)

SOURCES = {'InputMask-v0': "info['action_mask']", 'InputMaskMethod-v0': 'env.action_masks()'}

# Masks refused, and the words that say why. Every one of them would be taken as "allowed" by a cast to bool.
BAD_MASKS = [
    (np.array(['a', 'b', 'c']), r"holds text \('a' at \[0\]\)"),
    (['a', 'b', 'c'], r"holds text \('a' at \[0\]\)"),
    (np.array([b'1', b'0', b'1']), 'holds bytes'),
    (np.array([1.0, np.nan, 1.0]), r'holds nan at \[1\]'),
    ([1.0, 0.0, np.inf], r'holds inf at \[2\]'),
    (np.array([1.0, -np.inf, 1.0], np.float32), r'holds -inf at \[1\]'),
    (np.array([1, 2, 0], np.int8), r'holds 2 at \[1\]'),
    (np.array([1, -1, 0]), r'holds -1 at \[1\]'),
    (np.array([0.5, 1.0, 1.0]), r'holds 0.5 at \[0\]'),
    (np.array([1, 0, 1], object), 'holds objects: .*got dtype object'),
    ([True, None, True], r'holds objects \(None at \[1\]\)'),
    (np.array([1 + 0j, 0, 1]), 'holds complex numbers'),
    (np.array([[1, 0, 1]], np.int8), r'is shaped \(1, 3\): expected \(3,\)'),
    (np.array([1, 0], bool), r'is shaped \(2,\): expected \(3,\)'),
    (np.array([1, 0, 1, 1], bool), r'is shaped \(4,\): expected \(3,\)'),
    (None, 'is None'),
    (1, r'is shaped \(\): expected \(3,\)'),
    ([[1], [1, 0], [1]], 'is a ragged list'),
]


def settings(name: str) -> dict:
    """Small settings: a few updates in a few dozen steps."""
    return {'PPO': {'n_steps': 8, 'mini_batches': 2, 'ppo_epochs': 1}, 'A2C': {'n_steps': 5},
            'TRPO': {'n_steps': 8, 'mini_batches': 2, 'critic_iterations': 1},
            'ACER': {'n_steps': 5, 'buffer_max_size': 4, 'buffer_initial_size': 1},
            }.get(name, {'buffer_initial_size': 10, 'buffer_batch_size': 5, 'buffer_max_size': 100})


def actions_of(predicted):
    """predict's actions, whether it returns them alone or as ``(actions, state)``."""
    return predicted[0] if isinstance(predicted, tuple) else predicted


# ------------------------------------------------------------------------------------------------ action masks
@pytest.mark.parametrize('mask', [np.array([1, 0, 1], bool), np.array([1, 0, 1], np.int8),
                                  np.array([1, 0, 1], np.uint8),
                                  np.array([1, 0, 1], np.int64), np.array([1.0, 0.0, 1.0], np.float32),
                                  np.array([1.0, -0.0, 1.0]), [True, False, True], [1, 0, 1], (1.0, 0.0, 1.0)],
                         ids=lambda mask: f'{type(mask).__name__}-{np.asarray(mask).dtype}')
def test_booleans_and_0_1_numbers_are_masks_exactly(mask):
    checked = as_mask(mask, (N,), 'x')
    assert checked.dtype == bool
    np.testing.assert_array_equal(checked, [True, False, True])


@pytest.mark.parametrize('mask, words', BAD_MASKS, ids=[str(i) for i in range(len(BAD_MASKS))])
def test_anything_else_is_refused_naming_the_mask_its_source_and_what_is_wrong(mask, words):
    with pytest.raises(MaskError, match=r"^action mask from info\['action_mask'\] " + words):
        as_mask(mask, (N,), "info['action_mask']")


@pytest.mark.parametrize('env_id', list(SOURCES))
@pytest.mark.parametrize('mask, words', [BAD_MASKS[i] for i in (0, 1, 3, 4, 6, 8, 10, 14)],
                         ids=['text', 'text-list', 'nan', 'inf', 'two', 'half', 'none', 'longer'])
def test_an_env_whose_mask_goes_bad_mid_run_stops_training_in_one_line(env_id, mask, words):
    agent = xagents.PPO(create_envs(env_id, n_envs=2, seed=0, env_kwargs={'bad': mask, 'at': 3}), seed=0,
                        **settings('PPO'))
    with pytest.raises(EnvError) as error:
        agent.fit(max_steps=64, quiet=True)
    message = str(error.value)
    assert '\n' not in message
    assert message.startswith(f'{env_id} failed in step at env step 4: MaskError: action mask from '
                              f'{SOURCES[env_id]} in step '), message
    assert re.search(words, message), message
    assert sum(env.unwrapped.forbidden for env in agent.envs.envs) == 0  # no forbidden action was sent first


def test_a_bad_mask_beside_another_envs_good_one_is_refused_not_cast_by_stacking():
    # Env 0 gives int8 0/1, env 1 NaN in the same step: Gymnasium would stack both into env 0's int8 array.
    MaskEnv.made = 0
    agent = xagents.PPO(create_envs('InputMask-v0', n_envs=2, seed=0, env_kwargs={
        'bad': np.array([1.0, np.nan, 1.0]), 'at': 2, 'bad_envs': (1,)}), seed=0, **settings('PPO'))
    with pytest.raises(EnvError, match=r"failed in step at env step 2: MaskError: action mask from "
                                       r"info\['action_mask'\] in step holds nan at \[1\]"):
        agent.fit(max_steps=64, quiet=True)


def test_a_mask_that_changes_shape_mid_run_in_one_env_names_the_mask_and_both_shapes():
    MaskEnv.made = 0
    agent = xagents.DQN(create_envs('InputMaskMethod-v0', n_envs=2, seed=0, env_kwargs={
        'bad': np.ones(4, bool), 'at': 5, 'bad_envs': (1,)}), seed=0, **settings('DQN'))
    with pytest.raises(EnvError, match=r'InputMaskMethod-v0 failed in step at env step 8: MaskError: action mask from '
                                       r'env.action_masks\(\) in step is shaped \(4,\): expected \(3,\)'):
        agent.fit(max_steps=64, quiet=True)


@pytest.mark.parametrize('convention', ['info', 'method'])
def test_a_vector_env_of_yours_has_its_masks_checked_where_they_are_read(convention):
    """A vector env not made by create_envs: its stacked masks are checked as the agent reads them."""
    entry = MaskEnv if convention == 'info' else MethodMaskEnv
    envs = gym.vector.SyncVectorEnv([lambda: entry(bad=np.array([1.0, np.nan, 1.0]), at=3)] * 2,
                                    autoreset_mode=AUTORESET_MODE)
    agent = xagents.PPO(envs, seed=0, **settings('PPO'))
    source = r"info\['action_mask'\]" if convention == 'info' else r'env.action_masks\(\)'
    with pytest.raises(EnvError, match=rf'^{entry.__name__} at env step 6: action mask from {source} holds nan at '
                                       r'\[0, 1\]: expected booleans or 0/1 \(float64\)$'):
        agent.fit(max_steps=64, quiet=True)


def test_a_bad_mask_stops_the_command_line_run_with_status_1_in_one_line(xagents_cli, workdir):
    status, out, error = xagents_cli('train', 'ppo', '--env', 'InputMask-v0', '--env-kwargs', 'bad=0.5', 'at=2',
                                     '--n-envs', '2', '--n-steps', '8', '--max-steps', '64', '--quiet')
    lines = error.strip().splitlines()
    assert status == 1 and len(lines) == 1 and 'Traceback' not in out + error, error
    assert lines[0].startswith("xagents train ppo: error: InputMask-v0 failed in step at env step 2: MaskError: "
                               "action mask from info['action_mask'] in step is shaped (): expected (3,), one entry "
                               "per action")


def test_evaluation_and_play_check_the_masks_too():
    """A mask that allows no action is refused wherever an agent would act on it, in training (as before),
    evaluation and predict (SB3-contrib's masked distribution would draw among forbidden actions instead)."""
    training = xagents.DQN(create_envs('InputMask-v0', n_envs=2, seed=0, env_kwargs={
        'bad': np.zeros(N, np.int8), 'at': 2}), seed=0, **settings('DQN'))
    with pytest.raises(EnvError, match=r'^InputMask-v0 at env step 4: env 0 allows no action \(its action mask is all '
                                       r'False\)$'):
        training.fit(max_steps=64, quiet=True)
    agent = xagents.PPO(create_envs('InputMask-v0', n_envs=2, seed=0), seed=0, **settings('PPO'))
    bad_envs = create_envs('InputMask-v0', n_envs=2, seed=0, env_kwargs={'bad': np.array([1, 0, 3]), 'at': 2})
    with pytest.raises(EnvError, match=r"failed in step \(evaluation\): MaskError: action mask from "
                                       r"info\['action_mask'\] in step holds 3 at \[2\]"):
        agent.evaluate(2, env=bad_envs)
    mine = gym.vector.SyncVectorEnv([lambda: MaskEnv(bad=['x', 'y', 'z'], at=2)], autoreset_mode=AUTORESET_MODE)
    with pytest.raises(EnvError, match=r"^MaskEnv: action mask from info\['action_mask'\] holds text"):
        agent.evaluate(2, env=mine)
    empty = gym.vector.SyncVectorEnv([lambda: MaskEnv(bad=np.zeros(N, bool), at=2)], autoreset_mode=AUTORESET_MODE)
    with pytest.raises(EnvError, match=r'^MaskEnv: env 0 allows no action \(its action mask is all False\)'):
        agent.evaluate(2, env=empty)
    bad_play = xagents.PPO(create_envs('InputMaskMethod-v0', seed=0, env_kwargs={'bad': [1, np.nan, 1], 'at': 2}),
                           seed=0, **settings('PPO'))
    with pytest.raises(ValueError, match=r'action mask from env.action_masks\(\) in step holds nan at \[1\]'):
        bad_play.play()


def test_predict_takes_masks_as_the_envs_give_them_and_refuses_the_rest():
    agent = xagents.PPO(create_envs('InputMask-v0', seed=0), seed=0, **settings('PPO'))
    observation = np.zeros(2, np.float32)
    for mask in (GOOD, GOOD.astype(bool), GOOD.astype(np.float32), [True, False, True], [1, 0, 1]):
        assert actions_of(agent.predict(observation, action_mask=mask)) in (0, 2)
    batch = actions_of(agent.predict(np.zeros((4, 2), np.float32), action_mask=np.tile(GOOD, (4, 1))))
    assert set(np.asarray(batch).tolist()) <= {0, 2}
    for mask, words in BAD_MASKS:
        if mask is None or isinstance(mask, np.ndarray) and mask.shape == (1, N):
            continue  # no mask; one observation's mask as a batch of one, which is taken
        with pytest.raises(ValueError, match=r"^action mask from predict's action_mask "):
            agent.predict(observation, action_mask=mask)
    with pytest.raises(ValueError, match=r"predict's action_mask is shaped \(3,\): expected \(4, 3\)"):
        agent.predict(np.zeros((4, 2), np.float32), action_mask=GOOD)
    with pytest.raises(ValueError, match=r'allows no action \(its action mask is all False\)'):
        agent.predict(observation, action_mask=np.zeros(N))


def test_check_env_checks_the_masks_it_sees_as_agents_do():
    assert check_env(MaskEnv(), steps=10).ok
    for mask, words in BAD_MASKS:
        if mask is None:
            continue  # (MaskEnv's None is no bad mask)
        result = check_env(MaskEnv(bad=mask, at=2), steps=10)
        assert not result.ok and len(result.errors) == 1, (mask, result.errors)
        assert re.match(r"action mask from info\['action_mask'\] in step " + words, result.errors[0]), result.errors
        method = check_env(MethodMaskEnv(bad=mask, at=0), steps=10)
        assert not method.ok and method.errors[0].startswith('action mask from env.action_masks() in reset ')


def test_an_export_refuses_a_mask_that_is_not_booleans(tmp_path):
    from xagents.storage.export import load_exported

    agent = xagents.PPO(create_envs('InputMask-v0', seed=0), seed=0, **settings('PPO'))
    exported = load_exported(agent.export(str(tmp_path / 'masked'), action_mask=True))
    assert exported(np.zeros((1, 2), np.float32), GOOD[None])[0] in (0, 2)
    with pytest.raises(ValueError, match=r"action mask from the export's action_mask holds nan at \[0, 1\]"):
        exported(np.zeros((1, 2), np.float32), np.array([[1.0, np.nan, 1.0]]))


# ------------------------------------------------------------------------------- agents that do not mask
def non_masking_cases():
    """Every agent that does not act within masks, on an env that offers them: agents without ``masks_actions``,
    and masking agents on actions that are not masked (Box, MultiBinary)."""
    cases = []
    for name in AGENTS:
        klass = agent_class(name)
        for env_id, space in (('InputMask-v0', gym.spaces.Discrete), ('InputBoxMask-v0', gym.spaces.Box),
                              ('InputBinaryMask-v0', gym.spaces.MultiBinary)):
            if space in klass.supported_action_spaces and not (klass.masks_actions and space is gym.spaces.Discrete):
                cases.append((klass.__name__, env_id))
    names = {name for name, _ in cases}  # every agent without masks_actions, and the masking ones on other actions
    assert {agent_class(name).__name__ for name in AGENTS if not agent_class(name).masks_actions} <= names
    assert {'ACER', 'DDPG', 'TD3', 'SAC', 'PPO', 'A2C', 'TRPO'} <= names
    return cases


@pytest.mark.parametrize('name, env_id', non_masking_cases())
def test_every_agent_that_does_not_mask_says_so_once_in_the_same_words(name, env_id, caplog):
    agent = getattr(xagents, name)(create_envs(env_id, n_envs=2, seed=0), seed=0, **settings(name))
    with caplog.at_level(logging.WARNING, logger='xagents'):
        agent.fit(max_steps=30, quiet=True)
        agent.fit(max_steps=20, quiet=True)
    said = [record.getMessage() for record in caplog.records if 'action masks' in record.getMessage()]
    space = agent.envs.single_action_space
    assert said == [f'{env_id} offers action masks, which {name} does not use on {" ".join(str(space).split())} '
                    'actions: it may send actions the env forbids (masks are for the Discrete actions of PPO, A2C, '
                    'TRPO, DQN and SAC and the MultiDiscrete actions of PPO, A2C and TRPO)'], said
    observation = np.zeros(2, np.float32)
    with pytest.raises(ValueError, match=f'^{name} on .* takes no action mask: masks are for the Discrete actions'):
        agent.predict(observation, action_mask=np.ones(agent.envs.single_action_space.shape or N, bool))


# ------------------------------------------------------------------------------------------------ observations
@pytest.mark.parametrize('bad, words', [
    (7, '= 7: expected an integer from 0 to 3'), (-1, '= -1: expected an integer from 0 to 3'),
    (4, '= 4: expected'), (1.5, '= 1.5: expected an integer'), (np.int64(9), '= 9: expected'),
    (np.nan, '= nan: expected'), (None, r'of objects \(object, None\): expected numbers')])
@pytest.mark.parametrize('kind', ['dict', 'discrete'])
@pytest.mark.parametrize('at, call', [(0, 'reset'), (3, 'step')])
def test_a_discrete_observation_out_of_range_is_named_with_its_key_value_and_space(bad, words, kind, at, call):
    envs = create_envs('InputObservation-v0', n_envs=2, seed=0, env_kwargs={'bad': bad, 'at': at, 'kind': kind})
    agent = xagents.PPO(envs, seed=0, **settings('PPO'))
    key = r"observation\['direction'\]" if kind == 'dict' else '(an )?observation'
    with pytest.raises(EnvError) as error:
        agent.fit(max_steps=64, quiet=True)
    message = str(error.value)
    assert re.match(rf'InputObservation-v0 failed in {call} at env step \d+: ObservationError: {call} '
                                  rf'returned {key} {words}', message), message
    if 'integer' in words:
        assert message.endswith('(Discrete(4))')


@pytest.mark.parametrize('bad, words', [
    (np.zeros(4, np.float32), r'an observation shaped \(4,\): expected \(3,\)'),
    (np.zeros((3, 1), np.float32), r'an observation shaped \(3, 1\): expected \(3,\)'),
    (0.5, r'an observation shaped \(\): expected \(3,\)'),
    (np.array(['a', 'b', 'c']), r"an observation of text \(<U1, 'a'\): expected numbers shaped \(3,\)"),
    ([0.0, None, 1.0], r'an observation of objects \(object, None\): expected numbers'),
    ([[0.0], [1.0, 2.0]], 'an observation of list .* that is no array')])
@pytest.mark.parametrize('at, call', [(0, 'reset'), (3, 'step')])
def test_an_observation_of_another_shape_or_of_text_names_the_call_step_and_shapes(bad, words, at, call):
    envs = create_envs('InputObservation-v0', n_envs=2, seed=0, env_kwargs={'bad': bad, 'at': at})
    agent = xagents.PPO(envs, seed=0, **settings('PPO'))
    with pytest.raises(EnvError, match=rf'^InputObservation-v0 failed in {call} at env step {4 if at else 0}: '
                                       rf'ObservationError: {call} returned {words}'):
        agent.fit(max_steps=64, quiet=True)


def test_a_gym_env_of_yours_is_checked_too():
    agent = xagents.PPO(ObservationEnv(bad=np.zeros(5, np.float32)), seed=0, **settings('PPO'))
    with pytest.raises(EnvError, match=r'ObservationEnv failed in step at env step 2: ObservationError: step returned '
                                       r'an observation shaped \(5,\): expected \(3,\)'):
        agent.fit(max_steps=64, quiet=True)


def test_a_vector_env_of_yours_has_its_dict_observations_checked_as_they_are_packed():
    envs = gym.vector.SyncVectorEnv([lambda: ObservationEnv(bad=5, at=2, kind='dict')] * 2,
                                    autoreset_mode=AUTORESET_MODE)
    agent = xagents.PPO(envs, seed=0, **settings('PPO'))
    with pytest.raises(EnvError, match=r"^ObservationEnv in step at env step 4: observation\['direction'\] = 5 in "
                                       r'env 0: expected an integer from 0 to 3 \(Discrete\(4\)\)$'):
        agent.fit(max_steps=64, quiet=True)


def test_predict_names_a_discrete_value_out_of_range():
    agent = xagents.PPO(create_envs('InputObservation-v0', seed=0, env_kwargs={'kind': 'dict'}), seed=0,
                        **settings('PPO'))
    for bad in (7, -1, 2.5):
        with pytest.raises(ValueError, match=rf"observation\['direction'\] = {bad} in row 0: expected an integer "
                                             r'from 0 to 3 \(Discrete\(4\)\)'):
            agent.predict({'direction': np.array(bad), 'position': np.zeros(2, np.float32)})
    with pytest.raises(ValueError, match=r"observation\['direction'\] of text"):
        agent.predict({'direction': np.array('a'), 'position': np.zeros(2, np.float32)})
    states = xagents.PPO(create_envs('InputObservation-v0', seed=0, env_kwargs={'kind': 'discrete'}), seed=0,
                         **settings('PPO'))
    assert actions_of(states.predict(3)) in (0, 1)
    for bad in (4, -1):
        with pytest.raises(ValueError, match=rf'expected Discrete\(4\) states from 0 to 3 .*, got {bad}'):
            states.predict(bad)
    box = xagents.PPO(create_envs('InputObservation-v0', seed=0), seed=0, **settings('PPO'))
    with pytest.raises(ValueError, match=r'expected observations of numbers shaped \(3,\), got an array of <U1'):
        box.predict(np.array(['a', 'b', 'c']))


@pytest.mark.parametrize('kind', ['box', 'dict', 'discrete'])
@pytest.mark.parametrize('bad', ['abc', np.array(['a', 'b', 'c']), ['1', '2', '3'], np.str_('3'), b'abc', {'x': 'a'},
                                 1 + 2j, np.zeros(3, complex), [[1, 2], [3]], [None, None, None], object()],
                         ids=['str', 'str-array', 'str-list', 'np-str', 'bytes', 'dict-of-str', 'complex',
                              'complex-array', 'ragged', 'none', 'object'])
def test_predict_on_text_or_what_is_no_array_of_numbers_is_one_line_value_error(kind, bad):
    """Whatever predict is handed (text, bytes, complex numbers, rows of different lengths), the answer is one
    ValueError saying what observations it takes, on the whole observation and on each key of a Dict one."""
    env_kwargs = None if kind == 'box' else {'kind': kind}
    agent = xagents.PPO(create_envs('InputObservation-v0', seed=0, env_kwargs=env_kwargs), seed=0, **settings('PPO'))
    given = [bad] if kind != 'dict' else [bad, {'direction': bad, 'position': np.zeros(2, np.float32)},
                                          {'direction': 1, 'position': bad}]
    for observation in given:
        with pytest.raises(ValueError, match='expected') as error:
            agent.predict(observation)
        assert '\n' not in str(error.value), error.value


# ------------------------------------------------------------------------------------------------ action spaces
def broken_multi_discrete() -> gym.spaces.MultiDiscrete:
    space = gym.spaces.MultiDiscrete([3, 2])
    space.nvec[1] = 0  # Gymnasium refuses [3, 0] when made; an env may still end up with it
    return space


def broken_multi_binary() -> gym.spaces.MultiBinary:
    space = gym.spaces.MultiBinary(2)
    space.n, space._shape = 0, (0,)
    return space


EMPTY_SPACES = [
    (lambda: gym.spaces.MultiDiscrete([]), r'MultiDiscrete\(\[\]\) has no dimension \(nvec of shape \(0,\)\)'),
    (lambda: gym.spaces.MultiDiscrete(np.zeros((2, 0), np.int64)), r'has no dimension \(nvec of shape \(2, 0\)\)'),
    (broken_multi_discrete, r'dimension 1 of MultiDiscrete\(\[3 0\]\) has 0 options: expected 1 or more'),
    (broken_multi_binary, r'MultiBinary\(0\) has no dimension \(shape \(0,\)\)'),
    (lambda: gym.spaces.Box(-1.0, 1.0, (0,), np.float32), r'has no dimension \(shape \(0,\)\)'),
]


@pytest.mark.parametrize('make_space, words', EMPTY_SPACES,
                         ids=['empty', 'empty-2d', 'zero-option', 'binary-0', 'box-0'])
@pytest.mark.parametrize('name', ['PPO', 'A2C', 'TRPO'])
def test_an_action_space_with_nothing_to_choose_is_refused_when_the_agent_is_made(make_space, words, name):
    with pytest.raises(ValueError, match=f'^no agent can act in this action space: .*{words}$'):
        getattr(xagents, name)(SpaceEnv(make_space()), seed=0)
    result = check_env(SpaceEnv(make_space()), steps=3)
    assert not result.ok and re.match(f'no agent can act in this action space: .*{words}$',
                                                    result.errors[0]), result.errors


@pytest.mark.parametrize('make_space, words', [EMPTY_SPACES[0], EMPTY_SPACES[4]], ids=['empty', 'box-0'])
def test_a_vector_env_with_nothing_to_choose_is_refused_by_the_agent(make_space, words):
    envs = gym.vector.SyncVectorEnv([lambda: SpaceEnv(make_space())], autoreset_mode=AUTORESET_MODE)
    with pytest.raises(ValueError, match=f'^PPO cannot act in this action space: .*{words}$'):
        xagents.PPO(envs, seed=0)


def test_a_dimension_of_one_option_is_a_fixed_choice_and_one_of_none_is_refused():
    """Decided: MultiDiscrete with an nvec entry of 1 is taken (Gymnasium makes it; its choice is always 0), one of
    0 is not."""
    agent = xagents.PPO(SpaceEnv(gym.spaces.MultiDiscrete([1, 3])), seed=0, **settings('PPO'))
    agent.fit(max_steps=32, quiet=True)
    actions = np.asarray(actions_of(agent.predict(np.zeros((16, 2), np.float32), deterministic=False)))
    assert actions.shape == (16, 2) and (actions[:, 0] == 0).all() and set(actions[:, 1]) <= {0, 1, 2}
    assert check_env(SpaceEnv(gym.spaces.MultiDiscrete([1, 3])), steps=5).ok
    with pytest.raises(ValueError, match=r'dimension 1 of MultiDiscrete\(\[3 0\]\) has 0 options'):
        xagents.PPO(SpaceEnv(broken_multi_discrete()), seed=0)


# -------------------------------------------------------------------------------------- recurrent exports
def test_a_recurrent_export_refuses_a_state_of_another_size_naming_the_input(tmp_path):
    import tensorflow as tf

    from xagents.storage.export import load_exported

    agent = xagents.PPO.from_env('CartPoleNoVel-v1', recurrent='lstm', seed=0, n_steps=8, quiet=True)
    observations = np.zeros((1, *agent.envs.single_observation_space.shape), np.float32)
    size = agent.new_memory(1).state.shape[1]
    wrong = np.zeros((1, size - 1), np.float32)
    for format, name in (('saved_model', 'policy'), ('onnx', 'policy.onnx'), ('tflite', 'policy.tflite')):
        try:
            exported = load_exported(agent.export(str(tmp_path / name)))
        except ImportError:
            continue
        _, state = exported(observations)
        assert state.shape == (1, size)
        with pytest.raises(ValueError, match=rf'^this export takes state shaped \(batch, {size}\), got shape '
                                             rf'\(1, {size - 1}\)$'):
            exported(observations, state=wrong)
        width = observations.shape[1]
        with pytest.raises(ValueError, match=rf'^this export takes observations shaped \(batch, {width}\), '
                                             rf'got shape \({width},\)'):
            exported(observations[0])
    # The runtimes themselves, called without xagents, name the input and the size it takes.
    signature = tf.saved_model.load(str(tmp_path / 'policy')).signatures['serving_default']
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=rf'Shape of tensor state \[1,{size - 1}\] is not compatible with expected shape '
                             rf'\[\?,{size}\]'):
        signature(observations=tf.constant(observations), episode_start=tf.constant([True]), state=tf.constant(wrong))
    try:
        import onnxruntime
    except ImportError:
        return
    session = onnxruntime.InferenceSession(str(tmp_path / 'policy.onnx'), providers=['CPUExecutionProvider'])
    assert [tuple(value.shape) for value in session.get_inputs() if value.name == 'state'] == [('batch', size)]
    with pytest.raises(Exception, match=rf'(?s)invalid dimensions for input: state .* Got: {size - 1} '
                                        rf'Expected: {size}'):
        session.run(None, {'observations': observations, 'episode_start': np.ones(1, bool), 'state': wrong})
    with pytest.raises(ValueError, match=rf'expected a state shaped \({size},\), as predict returned it'):
        agent.predict(observations[0], state=wrong[0])


# -------------------------------------------------------------------------------------------------- precision
def keras_model(policy: str | None = None) -> keras.Model:
    inputs = keras.Input((2,))
    hidden = keras.layers.Dense(16, activation='tanh', dtype=policy)(inputs)
    return keras.Model(inputs, [keras.layers.Dense(N, dtype='float32')(hidden),
                                keras.layers.Dense(1, dtype='float32')(hidden)])


def test_bf16_is_refused_for_a_float32_keras_model_and_taken_for_a_bfloat16_one():
    with pytest.raises(ValueError, match=r"^PPO's model: precision='bf16' sets the dtype policy of .cfg models; a "
                                         r'Keras model of yours keeps its own \(float32 here\): build it under '
                                         r"keras.mixed_precision.set_dtype_policy\('mixed_bfloat16'\)"):
        xagents.PPO(create_envs('InputMask-v0', seed=0), model=keras_model(), precision='bf16')
    agent = xagents.PPO(create_envs('InputMask-v0', seed=0), model=keras_model('mixed_bfloat16'), precision='bf16',
                        seed=0, **settings('PPO'))
    assert [layer.compute_dtype for layer in agent.model.layers[1:]] == ['bfloat16', 'float32', 'float32']
    agent.fit(max_steps=16, quiet=True)
    assert xagents.PPO(create_envs('InputMask-v0', seed=0), model=keras_model()).precision == 'float32'


def test_bf16_is_refused_for_a_float32_keras_model_of_an_off_policy_agent():
    inputs = keras.Input((2,))
    q_values = keras.Model(inputs, keras.layers.Dense(N)(keras.layers.Dense(16, activation='relu')(inputs)))
    with pytest.raises(ValueError, match=r"^DQN's model: precision='bf16' sets the dtype policy of .cfg models"):
        xagents.DQN(create_envs('InputMask-v0', seed=0), model=q_values, precision='bf16')
