"""xagents.check_env and xagents check-env: spaces, agents, masks, warnings and random steps on real envs."""
import gymnasium as gym
import numpy as np
import pytest

import xagents
from xagents.utils.check_env import MASKING_AGENTS


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
    assert result.agents == ('PPO', 'A2C', 'TRPO', 'ACER', 'DQN', 'SAC')
    assert len(result.warnings) == 1 and 'normalize_observations' in result.warnings[0]


def test_pendulum_box_actions_are_rescaled_by_off_policy_agents_not_warned():
    result = xagents.check_env('Pendulum-v1', steps=20)
    assert result.ok and not result.warnings
    assert result.agents == ('PPO', 'A2C', 'TRPO', 'DDPG', 'TD3', 'SAC')
    assert any('rescale' in note for note in result.notes)


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
    assert result.agents == ('PPO', 'A2C', 'TRPO', 'ACER', 'DQN', 'SAC')


def test_multi_discrete_actions_name_the_agents_that_take_them():
    result = xagents.check_env('xagents.utils.toy_envs:MatchTargets-v0', steps=10)
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


def test_cli_reports_and_exits_0(xagents_cli):
    status, out, err = xagents_cli('check-env', 'Taxi-v4', '--steps', '20')
    assert status == 0, err
    assert "action masks: info['action_mask']" in out and 'agents: PPO A2C TRPO ACER DQN SAC' in out


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
])
def test_cli_bad_input_is_one_line_and_status_2(xagents_cli, argv, message):
    status, _, err = xagents_cli('check-env', *argv)
    assert status == 2 and err.startswith(message) and err.count('\n') == 1


def test_cli_help_loads_no_tensorflow():
    import subprocess
    import sys

    code = 'import sys; from xagents.app.cli import main; main(["check-env"]); assert "tensorflow" not in sys.modules'
    assert subprocess.run([sys.executable, '-c', code], capture_output=True).returncode == 0
