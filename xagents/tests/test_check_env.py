"""xagents.check_env and xagents check-env: spaces, agents, masks, warnings and random steps on real envs."""
import re

import gymnasium as gym
import numpy as np
import pytest

import xagents
from xagents.envs.check_env import MASKING_AGENTS


class WrongShape(gym.Env):
    """Says observations of 4 floats, returns 3 after a step."""

    observation_space = gym.spaces.Box(-1, 1, (4,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(4, np.float32), {}

    def step(self, action):
        return np.zeros(3, np.float32), 0.0, False, False, {}


class Unbounded(WrongShape):
    """Unbounded Box observations, and a mask method (SB3-contrib's) that forbids action 0."""

    observation_space = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
    sent = []

    def step(self, action):
        self.sent.append(int(action))
        return np.zeros(4, np.float32), 1.0, False, False, {}

    def action_masks(self):
        return np.array([False, True])


class NumpyReward(WrongShape):
    def step(self, action):
        return np.zeros(4, np.float32), [1.0], False, False, {}


def test_cartpole_passes_with_a_hint_for_its_unbounded_velocities():
    result = xagents.check_env('CartPole-v1', steps=50)
    assert result.ok and result.steps == 50 and result.masks is None
    assert result.agents == ('PPO', 'A2C', 'TRPO', 'ACER', 'DQN', 'QRDQN', 'SAC')
    assert len(result.warnings) == 1 and 'normalize_observations' in result.warnings[0]


def test_pendulum_box_actions_are_rescaled_by_off_policy_agents_not_warned():
    result = xagents.check_env('Pendulum-v1', steps=20)
    assert result.ok and not result.warnings
    assert result.agents == ('PPO', 'A2C', 'TRPO', 'DDPG', 'TD3', 'SAC', 'TQC', 'CrossQ')
    assert any('rescale' in note for note in result.notes)


def test_it_says_which_keys_are_pictures_and_which_are_grids_of_values():
    import xagents.tests.test_dict_observations  # noqa: F401  (registers Sensors-v0 and BigSensors-v0)

    grid = xagents.check_env('Sensors-v0', steps=10)
    assert any(note.startswith("observations under 'camera' are a grid of values ((6, 6, 1) uint8") and
               'normalised by default' in note for note in grid.notes), grid.notes
    picture = xagents.check_env('BigSensors-v0', steps=10)
    assert any(note.startswith("observations under 'camera' are pictures") for note in picture.notes), picture.notes
    assert not any('grid' in note for note in picture.notes)


def test_taxi_offers_masks_in_its_info():
    result = xagents.check_env('Taxi-v4', steps=50)
    assert result.ok and not result.warnings and result.masks == "info['action_mask']"


def test_masks_from_a_method_are_obeyed_and_unbounded_observations_warned():
    Unbounded.sent = []
    result = xagents.check_env(Unbounded(), steps=30)
    assert result.ok and result.masks == 'action_masks()' and Unbounded.sent == [1] * 30
    assert any('unbounded' in w and '--normalize-observations' in w for w in result.warnings)


class MultiMasked(WrongShape):
    """MultiDiscrete([3, 2]) actions whose mask allows only option 2 of the first choice and option 0 of the
    second."""

    observation_space = gym.spaces.Box(-1, 1, (4,), np.float32)
    action_space = gym.spaces.MultiDiscrete([3, 2], start=[1, 0])
    sent = []

    def step(self, action):
        self.sent.append(tuple(int(choice) for choice in action))
        return np.zeros(4, np.float32), 0.0, False, False, {}

    def action_masks(self):
        return np.array([False, False, True, True, False])


def test_multi_discrete_masks_are_obeyed_choice_by_choice():
    MultiMasked.sent = []
    result = xagents.check_env(MultiMasked(), steps=20)
    assert result.ok and result.masks == 'action_masks()' and MultiMasked.sent == [(3, 0)] * 20
    assert any(note.startswith('PPO, A2C, TRPO act within the masks') for note in result.notes)


def test_a_dict_env_with_a_text_key_is_taken_once_the_key_is_dropped():
    pytest.importorskip('minigrid')
    result = xagents.check_env('minigrid:MiniGrid-DoorKey-5x5-v0', steps=10)
    assert result.ok and result.agents == () and any("'mission'" in w for w in result.warnings)
    result = xagents.check_env('minigrid:MiniGrid-DoorKey-5x5-v0', observation_keys=['image', 'direction'], steps=10)
    assert result.ok and not result.warnings and 'PPO' in result.agents


def test_a_one_level_dict_env_passes():
    env = gym.wrappers.TransformObservation(
        gym.make('CartPole-v1'), lambda obs: {'position': obs[:2], 'angle': obs[2:]},
        gym.spaces.Dict({'position': gym.spaces.Box(-5, 5, (2,), np.float32),
                         'angle': gym.spaces.Box(-5, 5, (2,), np.float32)}))
    result = xagents.check_env(env, steps=20)
    assert result.ok, result.errors
    assert result.agents == ('PPO', 'A2C', 'TRPO', 'ACER', 'DQN', 'QRDQN', 'SAC')


def test_multi_discrete_actions_name_the_agents_that_take_them():
    result = xagents.check_env('xagents.envs.toy_envs:MatchTargets-v0', steps=10)
    assert result.ok and result.agents == ('PPO', 'A2C', 'TRPO')


def test_a_wrong_observation_shape_is_an_error():
    result = xagents.check_env(WrongShape(), steps=5)
    assert not result.ok and result.steps == 1
    assert result.errors == ['step returned an observation that is shaped (3,): the observation space says (4,)']
    assert 'error: step returned an observation that is shaped (3,)' in result.report()


def test_a_reward_that_is_no_scalar_is_an_error():
    result = xagents.check_env(NumpyReward(), steps=5)
    assert not result.ok and 'reward' in result.errors[0]


def test_unknown_ids_raise_value_error():
    with pytest.raises(ValueError, match='unknown environment id'):
        xagents.check_env('Nope-v1')


def test_masking_agents_are_those_that_mask():
    from xagents.registry import AGENTS, agent_class

    masking = {agent_class(name).__name__ for name in AGENTS if agent_class(name).masks_actions}
    assert masking == set(MASKING_AGENTS)


@pytest.mark.parametrize('env', [['Taxi-v4'], ['--env', 'Taxi-v4']])
def test_cli_reports_and_exits_0(xagents_cli, env):
    status, out, err = xagents_cli('check-env', *env, '--steps', '20')
    assert status == 0, err
    assert "action masks: info['action_mask']" in out and 'agents: PPO A2C TRPO ACER DQN QRDQN SAC' in out


def test_cli_exits_1_when_the_env_breaks_the_api(xagents_cli):
    gym.register('CheckWrongShape-v0', entry_point=WrongShape)
    try:
        status, out, _ = xagents_cli('check-env', 'CheckWrongShape-v0')
    finally:
        del gym.registry['CheckWrongShape-v0']
    assert status == 1 and 'error: step returned an observation that is shaped (3,)' in out


@pytest.mark.parametrize('argv, message', [
    (['Nope-v1'], "xagents check-env: error: unknown environment id 'Nope-v1'"),
    (['Pendulum-v1', '--env-kwargs', 'nope=1'], 'xagents check-env: error: making Pendulum-v1 with env_kwargs'),
    (['CartPole-v1', '--steps', '-1'], 'xagents check-env: error: expected --steps >= 0'),
    (['CartPole-v1', '--env', 'Taxi-v4'], 'xagents check-env: error: expected one env id, as ENV_ID or --env ENV_ID, '
                                          'got CartPole-v1 and Taxi-v4'),
    (['--steps', '5'], 'xagents check-env: error: expected one env id, as ENV_ID or --env ENV_ID, got none'),
])
def test_cli_bad_input_is_one_line_and_status_2(xagents_cli, argv, message):
    status, _, err = xagents_cli('check-env', *argv)
    assert status == 2 and err.startswith(message) and err.count('\n') == 1


def test_cli_help_loads_no_tensorflow():
    import subprocess
    import sys

    code = 'import sys; from xagents.app.cli import main; main(["check-env"]); assert "tensorflow" not in sys.modules'
    assert subprocess.run([sys.executable, '-c', code], capture_output=True).returncode == 0


# --------------------------------------------------------------------------------- Stable-Baselines3's checks
from xagents.envs.goal_envs import BitFlipping, PointReach  # noqa: E402


class ShapedReach(PointReach):
    """PointReach whose steps reward the negative distance while compute_reward stays sparse: with --her a batch
    would hold both scales."""

    def step(self, action):
        observation, _, terminated, truncated, info = super().step(action)
        return observation, -self.distance(), terminated, truncated, info


class OnePairFlipping(BitFlipping):
    """BitFlipping whose compute_reward takes one goal pair only (one number for any batch)."""

    def compute_reward(self, achieved_goal, desired_goal, info):
        return float(np.array_equal(achieved_goal, desired_goal)) - 1.0


class NotAGoalEnv(WrongShape):
    """A compute_reward method, and Box observations."""

    def step(self, action):
        return np.zeros(4, np.float32), 0.0, False, False, {}

    def compute_reward(self, achieved_goal, desired_goal, info):
        return 0.0


@pytest.mark.parametrize('env_id', ['BitFlipping-v0', 'PointReach-v0'])
def test_goal_envs_whose_rewards_are_compute_rewards_pass(env_id):
    result = xagents.check_env(env_id, steps=60)
    assert result.ok and result.goal_env and result.steps == 60, result.errors
    assert any(note.startswith('a goal env: --her') for note in result.notes)


@pytest.mark.parametrize('env, error', [
    (ShapedReach(), r'^step returned a reward of -0.\d+ where compute_reward\(achieved_goal, desired_goal, info\) '
                    r"gives -1: with --her a batch would mix step rewards and compute_reward ones; return "
                    r"compute_reward's value from step$"),
    (OnePairFlipping(4), r'^compute_reward is not vectorised: 2 goal pairs \(goals shaped \(2, 4\)\) gave float '
                         r'-1.0, expected 2 rewards of -1, as one pair gives; --her calls it on batches of goal '
                         r'pairs$'),
])
def test_a_goal_env_whose_step_reward_is_not_its_compute_reward_or_whose_compute_reward_takes_one_pair_fails(
        env, error):
    result = xagents.check_env(env, steps=20)
    assert not result.ok and result.goal_env and result.steps == 1 and len(result.errors) == 1
    assert re.match(error, result.errors[0]), result.errors[0]


def test_a_compute_reward_on_observations_her_does_not_take_is_warned():
    result = xagents.check_env(NotAGoalEnv(), steps=5)
    assert result.ok and not result.goal_env
    assert any(w.startswith('the env has a compute_reward method, as goal envs do, and her expects goal-env '
                            'observations') for w in result.warnings)


class NoSpaces(gym.Env):
    def reset(self, *, seed=None, options=None):
        return np.zeros(4, np.float32), {}

    def step(self, action):
        return np.zeros(4, np.float32), 0.0, False, False, {}


class NoActionSpace(NoSpaces):
    observation_space = gym.spaces.Box(-1, 1, (4,), np.float32)


def test_an_env_without_spaces_is_told_what_is_missing():
    result = xagents.check_env(NoSpaces())
    assert result.errors == [
        'the env has no observation_space: set self.observation_space to a gymnasium space (gymnasium.spaces.Box...) '
        'in its __init__',
        'the env has no action_space: set self.action_space to a gymnasium space (gymnasium.spaces.Discrete, Box...) '
        'in its __init__'] and result.steps == 0
    result = xagents.check_env(NoActionSpace())
    assert len(result.errors) == 1 and result.errors[0].startswith('the env has no action_space')
    assert 'observations: Box(-1.0, 1.0, (4,), float32)' in result.report()


class Images(gym.Env):
    """40x40 RGB images, declared uint8 channels-last unless told otherwise, returned as ``dtype``."""

    action_space = gym.spaces.Discrete(2)

    def __init__(self, dtype=np.uint8, shape=(40, 40, 3)):
        self.observation_space = gym.spaces.Box(0, 255, shape, np.uint8)
        self.dtype = dtype

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(self.observation_space.shape, self.dtype), {}

    def step(self, action):
        return np.zeros(self.observation_space.shape, self.dtype), 0.0, False, False, {}


def test_images_declared_uint8_that_arrive_as_floats_fail_as_agents_would_at_reset():
    assert xagents.check_env(Images(), steps=5).ok
    result = xagents.check_env(Images(np.float32), steps=5)
    assert result.errors == ['reset returned an observation that is float32: the observation space says uint8, and '
                             'vector envs refuse that cast (agents fail at reset): return uint8 observations, or '
                             'declare float32 ones']
    from xagents import PPO
    from xagents.envs.creation import EnvError

    with pytest.raises(EnvError, match="Cannot cast array data from dtype\\('float32'\\) to dtype\\('uint8'\\)"):
        PPO(Images(np.float32)).fit(max_steps=8)


def test_channels_first_images_are_named_and_refused_in_one_line_when_an_agent_is_built():
    from xagents import PPO

    result = xagents.check_env(Images(shape=(3, 40, 40)), steps=5)
    message = ('expect images channels-last (height x width x channels), got uint8 images shaped (3, 40, 40), '
               'channels first: transpose them with a wrapper, gymnasium.wrappers.TransformObservation(env, lambda '
               'obs: np.moveaxis(obs, 0, -1), Box(0, 255, (40, 40, 3), np.uint8))')
    assert result.ok and result.agents == ()
    assert result.warnings == [f'no agent takes these observations: agents {message}']
    with pytest.raises(ValueError, match=re.escape(f'PPO {message.replace("expect", "expects", 1)}')):
        PPO(Images(shape=(3, 40, 40)))


class UnboundedActions(WrongShape):
    observation_space = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
    action_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float64)

    def step(self, action):
        return np.array([0, 0, np.inf, 0], np.float32), 0.0, False, False, {}


def test_unbounded_or_float64_actions_and_infinite_observations():
    """inf bounds of observations: a warning (their scale is unknown); of actions: an error naming the agents that
    scale them (Stable-Baselines3 refuses them too); float64 actions: a warning as Stable-Baselines3's; an inf
    value in an unbounded Box: an error (agents stop a run there), though the space contains it."""
    result = xagents.check_env(UnboundedActions(), steps=5)
    assert result.agents == ('PPO', 'A2C', 'TRPO')
    assert result.errors == [
        'Box actions are unbounded (inf in low or high): DDPG, TD3 and SAC refuse them (they scale [-1, 1] to the '
        'bounds; Stable-Baselines3 refuses them too); PPO, A2C and TRPO would sample unclipped Gaussian actions; '
        'bound the space, e.g. to [-1, 1]',
        'step returned an observation that holds inf: agents stop a run at a non-finite observation']
    assert any(w.startswith('Box actions are float64: agents act in float32') for w in result.warnings)
    assert any(w.startswith('observations are unbounded in 4 of 4 entries') for w in result.warnings)


def test_cli_exits_1_when_a_goal_envs_step_reward_is_not_its_compute_reward(xagents_cli):
    gym.register('CheckShapedReach-v0', entry_point=ShapedReach, max_episode_steps=50)
    try:
        status, out, _ = xagents_cli('check-env', 'CheckShapedReach-v0', '--steps', '10')
    finally:
        del gym.registry['CheckShapedReach-v0']
    assert status == 1 and 'error: step returned a reward of -0.' in out and '1 error(s)' in out
