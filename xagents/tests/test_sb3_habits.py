"""What a Stable-Baselines3 user types first either works as they expect or fails at once with the xagents way:
fit's settings by position, predict's (action, state), SB3-style callbacks, SB3 names in Python and as flags,
buffer_size, wrapper_class, and env kwargs given as text."""
from __future__ import annotations

import json
import logging
import os

import gymnasium as gym
import numpy as np
import pytest

import xagents
from xagents import ACER, DDPG, DQN, PPO, SAC, TD3
from xagents.training.callbacks import Callback
from xagents.envs.creation import create_envs

WRAPPER = 'xagents.tests.test_sb3_habits:AppendOne'
WRAPPED: list[gym.Env] = []  # every env AppendOne wrapped, evaluation's and play's included


class AppendOne(gym.ObservationWrapper):
    """A user's observation wrapper: CartPole's 4 numbers and a 1 (an agent built on it refuses 4 numbers)."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        WRAPPED.append(self)
        space = env.observation_space
        self.observation_space = gym.spaces.Box(np.append(space.low, 1).astype(np.float32),
                                                np.append(space.high, 1).astype(np.float32), dtype=np.float32)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return np.append(observation, 1).astype(np.float32)


def scaled_rewards(env: gym.Env) -> gym.Env:
    """A user's reward wrapper: the learner sees rewards x100."""
    return gym.wrappers.TransformReward(env, lambda reward: 100 * reward)


class TwoActions(gym.Env):
    """Four observations, a 2-D Box action; ten steps an episode."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(4, np.float32), {}

    def step(self, action):
        self.t += 1
        return np.zeros(4, np.float32), float(-np.sum(np.square(action))), False, self.t >= 10, {}


@pytest.fixture(scope='module')
def ppo():
    return PPO(gym.make('CartPole-v1'), seed=0)


# ------------------------------------------------------------------------------------------------ fit
def test_fit_refuses_a_setting_by_position_with_the_keywords_it_may_mean(ppo):
    """fit(1000) is SB3's learn(1000): taken as a target reward it would train on and on."""
    with pytest.raises(TypeError) as error:
        ppo.fit(1000, max_steps=64, quiet=True)
    message = str(error.value)
    assert 'fit(max_steps=1000)' in message and 'learn(total_timesteps=1000)' in message
    assert 'fit(target_reward=...)' in message and '\n' not in message
    assert ppo.steps == 0  # refused before anything ran
    assert ppo.fit(max_steps=64, quiet=True).steps >= 64  # keywords train


# -------------------------------------------------------------------------------------------- predict
def test_predict_returns_action_and_state_as_sb3_does(ppo):
    observation = gym.make('CartPole-v1').reset(seed=0)[0]
    action, state = ppo.predict(observation)
    assert state is None and np.shape(action) == () and ppo.envs.single_action_space.contains(action)
    actions, state = ppo.predict(np.stack([observation] * 3))
    assert state is None and actions.shape == (3,)
    continuous = PPO(TwoActions())
    action, state = continuous.predict(np.zeros(4, np.float32))  # unpacks the pair, not the action's two numbers
    assert state is None and action.shape == (2,)


# ------------------------------------------------------------------------------------------ callbacks
class SB3Style(Callback):
    """A Callback written the Stable-Baselines3 way: its _on_step is never called by xagents."""

    def _on_step(self) -> bool:
        return False


class BaseCallbackLike:
    """Stable-Baselines3's BaseCallback surface, not an xagents Callback."""

    def __init__(self) -> None:
        self.num_timesteps = 0

    def on_step(self) -> bool:
        return self._on_step()

    def _on_step(self) -> bool:
        return False


def sb3_function(locals_, globals_) -> bool:
    return False


@pytest.mark.parametrize('callback, got', [
    (SB3Style(), 'SB3Style defines _on_step, which xagents never calls'),
    (BaseCallbackLike(), 'got BaseCallbackLike, a Stable-Baselines3-style callback (_on_step)'),
    (sb3_function, 'got the function sb3_function'),
    (SB3Style, 'got the class SB3Style (pass an instance: SB3Style())'),
    ('stop', 'got str'),
])
def test_a_callback_the_run_would_never_call_is_refused_before_training(ppo, callback, got):
    steps = ppo.steps
    with pytest.raises(TypeError) as error:
        ppo.fit(max_steps=64, callbacks=[callback], quiet=True)
    assert got in str(error.value)
    assert ('subclass xagents.training.callbacks.Callback and stop training by returning False from on_round(run) '
            "or on_episode(run, episode) (Stable-Baselines3's _on_step ~ on_round, self.num_timesteps ~ run.steps)"
            in str(error.value))
    assert ppo.steps == steps  # before anything ran


def test_one_callback_alone_is_taken_as_sb3_takes_callback(ppo):
    class StopAtOnce(Callback):
        def on_round(self, run) -> bool:
            return False

    run = ppo.fit(max_steps=10_000, callbacks=StopAtOnce(), quiet=True)
    assert run.reason == 'Stopped by StopAtOnce' and run.steps - run.start_steps == ppo.n_envs * ppo.n_steps


# ------------------------------------------------------------------------------------------ SB3 names
def agent(agent_class=PPO, env_id='CartPole-v1'):
    return agent_class(gym.make(env_id))


# name: (a Python call, the pointer it gives; the command line's words, the pointer there (None: no flag))
SB3_HABITS = {
    'learn': (lambda: agent().learn(total_timesteps=100), "fit(max_steps=N) trains N env steps (Stable-Baselines3's "
              'learn(total_timesteps=N)), fit(target_reward=R) until the mean reward reaches R', None, None),
    'n_eval_episodes': (lambda: agent().evaluate(n_eval_episodes=2), 'did you mean episodes?',
                        ['train', 'ppo', '--n-eval-episodes'], '--eval-episodes'),
    'n_eval_episodes (xagents.evaluate)': (lambda: xagents.evaluate(agent(), n_eval_episodes=2),
                                           'did you mean episodes?', ['play', 'ppo', '--n-eval-episodes'], '--episodes'),
    'return_episode_rewards': (lambda: xagents.evaluate(agent(), return_episode_rewards=True),
                               'the EvaluationResult evaluate returns (its .returns and .lengths are the per-episode '
                               'returns and lengths', ['play', 'ppo', '--return-episode-rewards'],
                               "--episodes N (xagents play logs each episode's reward)"),
    'tensorboard_log': (lambda: PPO(gym.make('CartPole-v1'), tensorboard_log='logs'),
                        'did you mean fit(tensorboard=DIR)?', ['train', 'ppo', '--tensorboard-log'],
                        '--tensorboard DIR'),
    'tb_log_name': (lambda: agent().fit(max_steps=10, tb_log_name='run'), "tensorboard='logs/NAME'",
                    ['train', 'ppo', '--tb-log-name'], '--tensorboard logs/NAME'),
    'net_arch': (lambda: PPO(gym.make('CartPole-v1'), net_arch=[64, 64]),
                 'a .cfg file (net_arch=[64, 64] is two [dense-N] sections of units=64)',
                 ['train', 'ppo', '--net-arch'], '--model, --actor-model or --critic-model with a .cfg file'),
    'device': (lambda: PPO(gym.make('CartPole-v1'), device='cpu'), "CUDA_VISIBLE_DEVICES='' set before it loads "
               'keeps it on the CPU', ['train', 'ppo', '--device'], 'CUDA_VISIBLE_DEVICES= xagents train ... keeps '
               'TensorFlow on the CPU'),
    'norm_obs': (lambda: PPO(gym.make('CartPole-v1'), norm_obs=True), 'did you mean normalize_observations?',
                 ['train', 'ppo', '--norm-obs'], '--normalize-observations'),
    'clip_obs': (lambda: PPO(gym.make('CartPole-v1'), clip_obs=5.0), "normalize_observations (VecNormalize's "
                 'norm_obs; it clips normalised observations to +-10', ['train', 'ppo', '--clip-obs'],
                 "--normalize-observations (VecNormalize's norm_obs"),
    'ent_coef (SAC)': (lambda: SAC(gym.make('Pendulum-v1'), ent_coef='auto'),
                       "alpha=X for a fixed entropy weight; left unset (ent_coef='auto') it is tuned automatically",
                       ['train', 'sac', '--ent-coef'], "--alpha X for a fixed entropy weight; without it "
                                                       "(ent_coef='auto') it is tuned automatically"),
    'action_noise (TD3)': (lambda: TD3(gym.make('Pendulum-v1'), action_noise=None),
                           "noise_type ('normal_0.1' for NormalActionNoise(sigma=0.1)", ['train', 'td3', '--action-noise'],
                           '--noise-type normal_0.1 (NormalActionNoise(sigma=0.1))'),
    'progress_bar': (lambda: agent().fit(max_steps=10, progress_bar=True),
                     'quiet (fit draws a progress bar on a terminal unless quiet=True)',
                     ['train', 'ppo', '--progress-bar'], '--quiet (a progress bar is drawn on a terminal'),
    'use_sde (TD3)': (lambda: TD3(gym.make('Pendulum-v1'), use_sde=True), 'did you mean PPO, A2C, SAC, TQC or '
                      'CrossQ, which take use_sde (gSDE)?', ['train', 'td3', '--use-sde'],
                      'did you mean xagents train ppo, a2c, sac, tqc or crossq, which take --use-sde (gSDE)?'),
    'wrapper_class': (lambda: PPO.from_env('CartPole-v1', wrapper_class=AppendOne),
                      'wrapper (a function gym.Env -> gym.Env applied to every env', ['train', 'ppo', '--wrapper-class'],
                      '--wrapper module:callable'),
}


@pytest.mark.parametrize('words, pointer', [
    (['-f', 'logs/'], "--save-dir DIR and --history-checkpoint FILE (RL Zoo's -f logs/"),
    (['--hyperparams', 'learning_rate:0.001'], 'each setting as its own flag: --lr 0.001'),
    (['-params', 'n_steps:128'], 'each setting as its own flag: --lr 0.001 --n-steps 128'),
    (['--vec-env', 'subproc'], "--async-envs (RL Zoo's --vec-env subproc)"),
    (['-P'], '--quiet (a progress bar is drawn on a terminal unless --quiet)'),
    (['-i', 'logs/ppo/CartPole-v1_1/CartPole-v1.zip'], '--weights PATH'),
    (['-optimize'], 'xagents tune AGENT --env ID'),
    (['--track'], '--monitor-session NAME (a wandb run)'),
])
def test_rl_zoos_train_flags_are_answered_with_the_xagents_flag(xagents_cli, words, pointer):
    status, _, err = xagents_cli('train', 'ppo', '--env', 'CartPole-v1', *words)
    assert status == 2 and err.startswith(f'xagents train ppo: error: unrecognized arguments: {" ".join(words)} '
                                          f'(did you mean ')
    assert pointer in err and len(err.splitlines()) == 1


@pytest.mark.parametrize('habit', SB3_HABITS)
def test_an_sb3_name_is_answered_with_the_xagents_way_in_python_and_on_the_command_line(xagents_cli, habit):
    call, pointer, argv, flag_pointer = SB3_HABITS[habit]
    with pytest.raises((TypeError, AttributeError)) as error:
        call()
    assert pointer in str(error.value) and '\n' not in str(error.value)
    if argv is not None:
        env = 'Pendulum-v1' if argv[1] in ('sac', 'td3') else 'CartPole-v1'
        status, _, err = xagents_cli(*argv[:2], '--env', env, argv[2], '1')
        assert status == 2 and err.startswith(f'xagents {argv[0]} {argv[1]}: error: unrecognized arguments: '
                                              f'{argv[2]} 1 (did you mean ')
        assert flag_pointer in err and len(err.splitlines()) == 1


@pytest.mark.parametrize('name, python, word, meaning', [
    ('target_entropy', 'auto', 'auto', "Stable-Baselines3's 'auto' is the default here: leave target_entropy unset"),
    ('gradient_steps', -1, '-1', "Stable-Baselines3's -1 (as many gradient steps as env steps collected) is "
                                 'gradient_steps equal to update_every'),
])
def test_an_sb3_value_is_refused_with_what_it_means_here(xagents_cli, name, python, word, meaning):
    with pytest.raises(ValueError) as error:
        SAC(gym.make('Pendulum-v1'), **{name: python})
    assert str(error.value).endswith(meaning + (' (-dim(A) for Box actions, 0.89 log n for n discrete ones)'
                                                 if name == 'target_entropy' else ''))
    status, _, err = xagents_cli('train', 'sac', '--env', 'Pendulum-v1', f'--{name.replace("_", "-")}', word)
    assert status == 2 and meaning in err and len(err.splitlines()) == 1


def test_a_constructor_given_a_fit_setting_by_its_sb3_name_points_to_fit():
    with pytest.raises(TypeError, match=r"'total_timesteps': did you mean fit\(max_steps=\.\.\.\)\?"):
        PPO(gym.make('CartPole-v1'), total_timesteps=1000)


# ---------------------------------------------------------------------------------------- buffer_size
class Pictures(gym.Env):
    """40 x 40 RGB pictures, two actions: image observations, whose DQN defaults are Atari-sized."""
    observation_space = gym.spaces.Box(0, 255, (40, 40, 3), np.uint8)
    action_space = gym.spaces.Discrete(2)


@pytest.mark.parametrize('agent_class, env_id, default', [
    (DQN, 'CartPole-v1', 1000), (DQN, 'pictures', 50_000), (DDPG, 'Pendulum-v1', 1000), (TD3, 'Pendulum-v1', 1000),
    (SAC, 'Pendulum-v1', 1000), (ACER, 'CartPole-v1', 500),
])
def test_buffer_size_is_the_capacity_and_caps_the_initial_fill_it_cannot_hold(caplog, agent_class, env_id, default):
    capacity = 400 if agent_class is ACER else 600
    with caplog.at_level(logging.INFO, logger='xagents'):
        built = agent_class(Pictures() if env_id == 'pictures' else gym.make(env_id), buffer_size=capacity)
    assert built.buffer_max_size == capacity and built.buffer_initial_size == min(default, capacity)
    messages = [record.getMessage() for record in caplog.records]
    assert not [message for message in messages if 'deprecated' in message]
    capped = [message for message in messages if 'buffer_initial_size' in message]
    if default > capacity:
        assert capped == [f'{agent_class.__name__}: buffer_initial_size {default:,} (not given) is above '
                          f'buffer_max_size {capacity}: learning starts once the buffer holds {capacity} (give '
                          'buffer_initial_size to choose)']
    else:
        assert capped == []


def test_a_tuned_initial_size_is_capped_too_and_an_explicit_pair_that_conflicts_is_refused():
    assert DQN.from_env('CartPole-v1', buffer_size=500, quiet=True).buffer_initial_size == 500  # preset: 1,000
    with pytest.raises(ValueError, match='expected buffer_initial_size <= buffer_max_size = 500, got 800'):
        DQN(gym.make('CartPole-v1'), buffer_size=500, buffer_initial_size=800)
    with pytest.raises(ValueError, match='buffer_size is the old name of buffer_max_size: give one of them'):
        DQN(gym.make('CartPole-v1'), buffer_size=500, buffer_max_size=800)


def test_buffer_size_flag_trains_without_a_notice(workdir, xagents_cli):
    status, out, err = xagents_cli('train', 'dqn', '--env', 'CartPole-v1', '--buffer-size', '300', '--max-steps',
                                   '320', '--seed', '0')
    assert status == 0 and 'deprecated' not in err + out, err
    assert 'buffer_initial_size 1,000 (not given) is above buffer_max_size 300' in out


# -------------------------------------------------------------------------------------------- wrapper
def test_a_wrapper_wraps_training_and_evaluation_envs_and_keeps_the_id_preset():
    WRAPPED.clear()
    wrapped = PPO.from_env('CartPole-v1', wrapper=AppendOne, seed=0, quiet=True)
    assert wrapped.n_steps == 32 and wrapped.envs.num_envs == 8  # CartPole-v1's preset
    assert wrapped.envs.single_observation_space.shape == (5,) and len(WRAPPED) == 8
    run = wrapped.fit(max_steps=512, eval_frequency=256, eval_episodes=3)
    assert np.isfinite(run.eval_reward)  # evaluated on 5 numbers: an unwrapped env would give 4
    assert len(WRAPPED) == 8 + 2 * 3  # two evaluations of three envs, each wrapped
    result = wrapped.evaluate(episodes=2)
    assert len(WRAPPED) == 16 and len(result.returns) == 2
    envs = create_envs('CartPole-v1', n_envs=2, wrapper=WRAPPER)  # the same by module:name
    assert envs.single_observation_space.shape == (5,)


def test_a_reward_wrapper_changes_what_the_learner_sees_and_scores_stay_the_games():
    envs = create_envs('CartPole-v1', n_envs=1, seed=0, wrapper=scaled_rewards)
    envs.reset(seed=0)
    _, rewards, *_ = envs.step(np.array([0]))
    assert rewards[0] == 100.0
    learner = PPO(envs)
    result = learner.evaluate(episodes=2)
    np.testing.assert_array_equal(result.returns, result.lengths)  # CartPole's own +1 a step, not x100


def test_a_save_records_the_wrapper_and_load_and_play_rebuild_it(tmp_path):
    saved = PPO.from_env('CartPole-v1', wrapper=AppendOne, n_envs=2, quiet=True)
    saved.save(str(tmp_path / 'agent'))
    with open(tmp_path / 'agent' / 'agent.json') as file:
        assert json.load(file)['env']['wrapper'] == WRAPPER
    WRAPPED.clear()
    loaded = PPO.load(str(tmp_path / 'agent'))
    assert loaded.envs.single_observation_space.shape == (5,) and len(WRAPPED) == 2
    assert len(loaded.play(episodes=1).returns) == 1 and len(WRAPPED) == 3


def test_a_wrapper_no_save_can_name_is_said_in_one_line_at_load(tmp_path):
    saved = PPO.from_env('CartPole-v1', wrapper=lambda env: AppendOne(env), n_envs=2, quiet=True)
    saved.save(str(tmp_path / 'agent'))
    with pytest.raises(ValueError) as error:
        PPO.load(str(tmp_path / 'agent'))
    assert str(error.value).startswith('the envs were wrapped by test_a_wrapper_no_save_can_name_is_said_in_one_line_'
                                       'at_load.<locals>.<lambda>, which a save cannot record nor a worker import')
    assert 'pass the wrapper again (load(..., wrapper=fn)' in str(error.value)
    assert PPO.load(str(tmp_path / 'agent'), wrapper=AppendOne).envs.single_observation_space.shape == (5,)


def test_wrapper_flag_trains_and_play_rebuilds_it_from_the_save(workdir, xagents_cli):
    status, _, err = xagents_cli('train', 'ppo', '--env', 'CartPole-v1', '--wrapper', WRAPPER, '--n-envs', '2',
                                 '--max-steps', '64', '--save-dir', 'sd', '--save-frequency', '64', '--quiet')
    assert status == 0, err
    save = os.path.join('sd', sorted(os.listdir('sd'))[-1])
    WRAPPED.clear()
    status, out, err = xagents_cli('play', 'ppo', '--env', 'CartPole-v1', '--weights', save)
    assert status == 0 and 'Episode reward' in out, err
    assert len(WRAPPED) >= 1 and WRAPPED[-1].observation_space.shape == (5,)
    status, _, err = xagents_cli('train', 'ppo', '--env', 'CartPole-v1', '--wrapper', 'no_such_module:wrap')
    assert status == 2 and err == ("xagents train ppo: error: cannot import 'no_such_module' for wrapper "
                                   "no_such_module:wrap: ModuleNotFoundError: No module named 'no_such_module'\n")


# ------------------------------------------------------------------------------------- env kwargs as text
@pytest.mark.parametrize('env_id, kwargs, message', [
    ('Pendulum-v1', {'g': 'ten'}, "Pendulum-v1 env_kwargs: expected g to be a number (default 10.0), got the text 'ten'"),
    ('CartPole-v1', {'max_episode_steps': 'ten'},
     "CartPole-v1 env_kwargs: expected max_episode_steps to be an integer, got 'ten'"),
    ('CartPole-v1', {'sutton_barto_reward': 'false'},
     "CartPole-v1 env_kwargs: expected sutton_barto_reward to be true or false (default False), got the text 'false'"),
])
def test_an_env_kwarg_given_as_text_where_the_env_takes_a_number_is_named(env_id, kwargs, message):
    with pytest.raises(ValueError) as error:
        create_envs(env_id, env_kwargs=kwargs)
    assert str(error.value) == message


def test_env_kwargs_flag_given_as_text_is_one_line(xagents_cli):
    status, _, err = xagents_cli('train', 'ppo', '--env', 'Pendulum-v1', '--env-kwargs', 'g=ten', '--max-steps', '10')
    assert status == 2 and err == ("xagents train ppo: error: Pendulum-v1 env_kwargs: expected g to be a number "
                                   "(default 10.0), got the text 'ten'\n")


@pytest.mark.parametrize('name, pointer', [
    ('policy', 'agent.models'), ('get_parameters', 'agent.models[role].get_weights()'),
    ('set_parameters', 'set_weights(weights)'), ('set_random_seed', 'PPO(env, seed=0)'),
    ('num_timesteps', 'agent.steps'), ('env', 'agent.envs'), ('save_replay_buffer', 'include_buffer=True'),
    ('load_replay_buffer', 'include_buffer=True'), ('get_vec_normalize_env', 'normalize_observations=True'),
    ('replay_buffer', 'agent.buffer'),
])
def test_stable_baselines3_attributes_answer_with_the_xagents_way(name, pointer):
    with pytest.raises(AttributeError) as error:
        getattr(agent(), name)
    assert str(error.value).startswith(f"'PPO' object has no attribute {name!r}: ") and pointer in str(error.value)


@pytest.mark.parametrize('name, pointer', [('evaluate_policy', 'xagents.evaluate(agent, env, episodes=10)'),
                                           ('make_vec_env', 'from_env(env_id, n_envs=N)')])
def test_stable_baselines3_functions_asked_of_the_package_answer_with_the_xagents_way(name, pointer):
    with pytest.raises(AttributeError) as error:
        getattr(xagents, name)
    assert str(error.value).startswith(f"module 'xagents' has no attribute {name!r}: ") and pointer in str(error.value)
    with pytest.raises(AttributeError, match='no attribute .nonexistent.$'):
        xagents.nonexistent
