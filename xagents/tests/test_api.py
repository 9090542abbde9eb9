"""The Python API a Stable-Baselines3 user reaches for: predict, save/load, evaluate, any env, fit's step count."""
from __future__ import annotations

import json
import os
import re
import subprocess

import gymnasium as gym
import numpy as np
import pytest

import xagents
from xagents import A2C, DQN, PPO, SAC
from xagents.envs.creation import AUTORESET_MODE


def cartpole_observations(n: int = 100) -> np.ndarray:
    """``n`` observations from a real CartPole-v1 played with random actions."""
    env, found = gym.make('CartPole-v1'), []
    observation, _ = env.reset(seed=1)
    env.action_space.seed(1)
    while len(found) < n:
        found.append(observation)
        observation, _, terminated, truncated, _ = env.step(env.action_space.sample())
        if terminated or truncated:
            observation, _ = env.reset()
    return np.stack(found)


@pytest.fixture(scope='module')
def trained_ppo():
    agent = PPO.from_env('CartPole-v1', seed=0, quiet=True, normalize_observations=True)
    agent.fit(max_steps=4096)
    return agent


def test_predict_takes_one_observation_or_a_batch_and_matches_greedy_actions(trained_ppo):
    observations = cartpole_observations()
    batch, _ = trained_ppo.predict(observations)
    assert batch.shape == (100,) and set(np.unique(batch)) <= {0, 1}
    assert [int(trained_ppo.predict(o)[0]) for o in observations[:10]] == list(batch[:10])
    # The oracle: the policy's argmax on observations normalised by hand with the statistics.
    stats = trained_ppo.observation_stats
    normalised = np.clip((observations - stats.mean) / np.sqrt(stats.var + 1e-8), -10, 10).astype(np.float32)
    logits = trained_ppo.model(normalised)[0].numpy()
    np.testing.assert_array_equal(batch, logits.argmax(-1))


def test_predict_scales_box_actions_to_the_env_bounds():
    agent = SAC.from_env('Pendulum-v1', seed=0, quiet=True)
    observations = np.random.default_rng(0).uniform(-1, 1, (50, 3)).astype(np.float32)
    actions, _ = agent.predict(observations)
    mean = np.split(agent.actor(observations).numpy(), 2, -1)[0]
    np.testing.assert_allclose(actions, 2.0 * np.tanh(mean), rtol=1e-5, atol=1e-6)  # Pendulum: [-2, 2]
    assert actions.shape == (50, 1) and agent.predict(observations[0])[0].shape == (1,)


def test_predict_refuses_a_wrong_shape(trained_ppo):
    with pytest.raises(ValueError, match=r'expected an observation shaped \(4,\) or a batch shaped \(n, 4\), got shape \(3,\)'):
        trained_ppo.predict(np.zeros(3))


def test_save_and_load_rebuild_the_agent_from_the_directory_alone(trained_ppo, workdir):
    trained_ppo.save('saved')
    manifest = json.load(open('saved/agent.json'))
    assert manifest['agent'] == 'PPO' and manifest['env']['env_id'] == 'CartPole-v1' and manifest['steps'] == 4096
    loaded = PPO.load('saved')
    observations = cartpole_observations()
    np.testing.assert_array_equal(loaded.predict(observations)[0], trained_ppo.predict(observations)[0])
    assert loaded.steps == 4096 and loaded.n_envs == trained_ppo.n_envs
    np.testing.assert_array_equal(loaded.observation_stats.mean, trained_ppo.observation_stats.mean)
    for mine, theirs in zip(loaded.optimizer.variables, trained_ppo.optimizer.variables):
        np.testing.assert_array_equal(mine.numpy(), theirs.numpy())
    assert loaded.hyperparameters == {k: v for k, v in trained_ppo.hyperparameters.items() if k != 'quiet'}
    assert loaded.rng.bit_generator.state == trained_ppo.rng.bit_generator.state


@pytest.mark.parametrize('agent_class, env_id, settings', [
    (DQN, 'CartPole-v1', {'prioritized': True, 'return_steps': 3, 'target_update_interval': 2}),
    (SAC, 'Pendulum-v1', {}),
])
def test_a_loaded_agent_with_its_buffer_makes_the_same_next_update(workdir, agent_class, env_id, settings):
    """With include_buffer the loaded agent's next update equals the uninterrupted agent's, exactly."""
    agent = agent_class.from_env(env_id, seed=0, quiet=True, buffer_initial_size=300, buffer_batch_size=32,
                                 gradient_steps=3, **settings)
    agent.fit(max_steps=400)
    agent.save('saved', include_buffer=True)
    loaded = agent_class.load('saved')
    assert loaded.buffer.steps == agent.buffer.steps >= 400
    # The buffer file holds the rows in use, not the capacity's zeros; loaded, every array is as it was.
    from xagents.replay.buffer_state import _stateful_parts

    arrays = {(prefix, name): value for prefix, part in _stateful_parts(agent.buffer).items()
              for name, value in vars(part).items() if isinstance(value, np.ndarray)}
    buffer_file = os.path.join('saved', json.load(open('saved/agent.json'))['files']['buffer'])
    tree = sum(value.nbytes for (prefix, _), value in arrays.items() if prefix == 'tree')  # PER: 2 x capacity
    assert os.path.getsize(buffer_file) < 0.05 * sum(value.nbytes for value in arrays.values()) + tree
    loaded_parts = _stateful_parts(loaded.buffer)
    for (prefix, name), value in arrays.items():
        np.testing.assert_array_equal(getattr(loaded_parts[prefix], name), value)
    expected, got = agent.update(), loaded.update()
    assert {k: float(v) for k, v in got.items()} == {k: float(v) for k, v in expected.items()}
    for role in agent.model_roles:
        for mine, theirs in zip(loaded.models[role].weights, agent.models[role].weights):
            np.testing.assert_array_equal(mine.numpy(), theirs.numpy())
    agent.save('no-buffer')
    assert agent_class.load('no-buffer').buffer.steps == 0  # the default save leaves the buffer out


def test_saving_again_replaces_the_previous_files_and_keeps_one_set(trained_ppo, workdir):
    trained_ppo.save('saved')
    trained_ppo.save('saved')
    assert sorted(os.listdir('saved')) == ['agent.json', json.load(open('saved/agent.json'))['files']['model']]


def test_load_refuses_another_agent_env_or_a_newer_format(trained_ppo, workdir):
    trained_ppo.save('saved')
    with pytest.raises(ValueError, match=r'saved holds a saved PPO, not A2C: load it as PPO \(PPO.load, xagents '):
        A2C.load('saved')
    with pytest.raises(ValueError, match='saved comes from a run with env CartPole-v1, this one has Acrobot-v1'):
        PPO.load('saved', env='Acrobot-v1')
    manifest = json.load(open('saved/agent.json'))
    manifest['format_version'] = 99
    with open('saved/agent.json', 'w') as file:
        json.dump(manifest, file)
    with pytest.raises(ValueError, match='saved in format 99 by a newer xagents; this one reads up to 1'):
        PPO.load('saved')
    with pytest.raises(FileNotFoundError, match='no saved agent in nowhere'):
        PPO.load('nowhere')


def test_load_on_a_users_env_of_the_same_spaces(trained_ppo, workdir):
    trained_ppo.save('saved')
    loaded = PPO.load('saved', env=gym.make('CartPole-v1'))
    assert loaded.n_envs == 1
    observations = cartpole_observations()
    np.testing.assert_array_equal(loaded.predict(observations)[0], trained_ppo.predict(observations)[0])


def test_a_saved_directory_is_accepted_by_weights_on_the_command_line(trained_ppo, workdir, xagents_cli):
    trained_ppo.save('saved')
    status, out, err = xagents_cli('play', 'ppo', '--env', 'CartPole-v1', '--weights', 'saved', '--max-steps', '30')
    assert status == 0 and 'Episode reward' in out, err
    status, _, err = xagents_cli('play', 'a2c', '--env', 'CartPole-v1', '--weights', 'saved')
    assert status == 2, err
    assert err.strip().endswith('saved holds a saved PPO, not A2C: load it as PPO (PPO.load, xagents ... ppo)'), err


def test_evaluate_returns_per_episode_returns_and_lengths(trained_ppo):
    result = xagents.evaluate(trained_ppo, 'CartPole-v1', episodes=4, seed=5)
    assert result.returns.shape == result.lengths.shape == (4,)
    np.testing.assert_array_equal(result.returns, result.lengths)  # CartPole: +1 per step
    again = trained_ppo.evaluate(4, 'CartPole-v1', seed=5)
    np.testing.assert_array_equal(result.returns, again.returns)
    assert str(result).startswith(f'{result.mean:.2f} ± {result.std:.2f} over 4 episodes')


def test_evaluate_on_a_vector_env_of_fewer_envs_plays_every_episode_asked(trained_ppo):
    envs = gym.make_vec('CartPole-v1', num_envs=3, vectorization_mode='sync', vector_kwargs={'autoreset_mode': AUTORESET_MODE})
    result = xagents.evaluate(trained_ppo, envs, episodes=7, seed=0)
    assert len(result.returns) == 7 and (result.lengths >= 8).all()
    envs.close()


def test_agents_take_a_gym_env_or_a_same_step_vector_env():
    agent = PPO(gym.make('CartPole-v1'), quiet=True, n_steps=64, seed=0)
    run = agent.fit(max_steps=640)
    assert agent.n_envs == 1 and agent.steps == 640 and run.games > 0
    envs = gym.make_vec('CartPole-v1', num_envs=2, vectorization_mode='sync', vector_kwargs={'autoreset_mode': AUTORESET_MODE})
    assert DQN(envs, quiet=True, buffer_initial_size=64, buffer_batch_size=32).fit(max_steps=200).games > 0


def test_an_env_id_given_to_the_constructor_points_to_from_env():
    with pytest.raises(ValueError, match='got str: build from an id with from_env'):
        A2C('CartPole-v1', quiet=True)


def test_a_vector_env_that_resets_on_the_next_step_is_refused():
    with pytest.raises(ValueError, match='expected a vector env with autoreset_mode SAME_STEP, got NEXT_STEP'):
        PPO(gym.make_vec('CartPole-v1', num_envs=2), quiet=True)


USER_ENVS = """
import gymnasium as gym
import numpy as np


class Plain(gym.Env):
    \"\"\"A user's env whose constructor takes no render_mode (Gymnasium's make passes none unless rendering).\"\"\"

    observation_space = gym.spaces.Box(-1, 1, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self):
        self.t = 0

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        return np.zeros(2, np.float32), float(action), False, self.t >= 5, {}


class Broken(Plain):
    def __init__(self):
        raise RuntimeError('no simulator licence found')


gym.register('Plain-v0', entry_point=Plain)
gym.register('Broken-v0', entry_point=Broken)
"""


@pytest.fixture
def user_envs(workdir):
    """``user_envs.py`` in the working directory (on the import path), registering Plain-v0 and Broken-v0."""
    import sys

    (workdir / 'user_envs.py').write_text(USER_ENVS)
    (workdir / 'typo_envs.py').write_text('import gymnasium as gym\ngym.register("Typo-v0", entry_point=Plian)\n')
    sys.path.insert(0, str(workdir))
    yield workdir
    sys.path.remove(str(workdir))
    for name in ('user_envs', 'typo_envs'):
        sys.modules.pop(name, None)


def test_an_env_without_render_mode_trains_and_one_that_fails_to_build_is_one_line(user_envs, xagents_cli):
    agent = PPO.from_env('user_envs:Plain-v0', quiet=True, n_envs=2, n_steps=8, mini_batches=2, seed=0)
    assert agent.fit(max_steps=64).games > 0 and agent.evaluate(episodes=2).lengths.tolist() == [5, 5]
    with pytest.raises(ValueError, match='^making user_envs:Broken-v0 failed: RuntimeError: no simulator licence found$'):
        PPO.from_env('user_envs:Broken-v0', quiet=True)
    status, out, err = xagents_cli('train', 'ppo', '--env', 'user_envs:Broken-v0', '--max-steps', '64')
    assert status == 2 and err.strip().splitlines()[-1].endswith(
        'making user_envs:Broken-v0 failed: RuntimeError: no simulator licence found') and 'Traceback' not in err + out
    status, out, err = xagents_cli('train', 'dqn', '--env', 'typo_envs:Typo-v0', '--max-steps', '64')
    assert status == 2 and "cannot import 'typo_envs' to make 'Typo-v0': NameError: name 'Plian' is not defined" in err
    assert 'Traceback' not in err + out


def test_a_users_registered_env_by_module_id_and_env_kwargs(workdir, xagents_cli, xagents_command):
    """``module:Env-v0`` imports the module that registers the env; --env-kwargs reach gym.make."""
    with open('my_envs.py', 'w') as file:
        file.write('import gymnasium as gym\n'
                   "gym.register('ShortCartPole-v0', entry_point='gymnasium.envs.classic_control:CartPoleEnv', "
                   'max_episode_steps=10)\n')
    import sys
    sys.path.insert(0, str(workdir))
    try:
        agent = PPO.from_env('my_envs:ShortCartPole-v0', quiet=True, n_steps=16, seed=0)
        run = agent.fit(max_steps=1280)
        assert 0 < run.best_reward <= 10  # episodes cut at 10 steps
        status, out, err = xagents_cli('train', 'ppo', '--env', 'LunarLander-v3', '--env-kwargs', 'continuous=True',
                                       'gravity=-9.0', '--max-steps', '64', '--n-steps', '16', '--n-envs', '2',
                                       '--mini-batches', '4')
        assert status == 0, err
        continuous = PPO.from_env('LunarLander-v3', env_kwargs={'continuous': True}, quiet=True, n_envs=1)
        assert isinstance(continuous.envs.single_action_space, gym.spaces.Box)
        status, _, err = xagents_cli('train', 'ppo', '--env', 'CartPole-v1', '--env-kwargs', 'wings=2', '--max-steps', '64')
        assert status == 2 and "making CartPole-v1 with env_kwargs {'wings': 2} failed: TypeError" in err
        status, _, err = xagents_cli('train', 'ppo', '--env', 'no_such_module:Thing-v0', '--max-steps', '64')
        assert status == 2 and "cannot import 'no_such_module'" in err
    finally:
        sys.path.remove(str(workdir))
    # The installed command finds ./my_envs.py as python -m does (a console script has no '' on its path).
    result = subprocess.run(xagents_command + ['train', 'ppo', '--env', 'my_envs:ShortCartPole-v0', '--max-steps', '64',
                                               '--n-steps', '16', '--n-envs', '2', '--mini-batches', '4'],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and 'Maximum steps (64) reached' in result.stdout, result.stderr


def test_fit_max_steps_counts_this_call_unless_total():
    agent = PPO.from_env('CartPole-v1', seed=0, quiet=True, n_envs=2, n_steps=64)
    agent.fit(max_steps=512)
    assert agent.steps == 512
    agent.fit(max_steps=256)
    assert agent.steps == 768
    agent.fit(max_steps=1024, total=True)
    assert agent.steps == 1024
    run = agent.fit(max_steps=600, total=True)  # reached already: no round at all
    assert agent.steps == 1024 and run.reason.startswith('Maximum steps (600) reached')


def test_play_episodes_is_seeded_so_the_same_command_plays_the_same_games(trained_ppo):
    first = trained_ppo.play(episodes=3, max_steps=200)
    again = trained_ppo.play(episodes=3, max_steps=200)
    assert len(first.returns) == 3
    np.testing.assert_array_equal(first.returns, again.returns)
    np.testing.assert_array_equal(first.returns, first.lengths)  # CartPole: +1 per step, whole games


def test_play_command_prints_each_episode_and_the_mean(trained_ppo, workdir, xagents_cli):
    trained_ppo.save('saved')
    status, out, err = xagents_cli('play', 'ppo', '--env', 'CartPole-v1', '--weights', 'saved', '--episodes', '3')
    assert status == 0, err
    rewards = [float(reward) for reward in re.findall(r'Episode reward: (\S+)', out)]
    assert len(rewards) == 3
    assert f'Mean reward: {np.mean(rewards):.2f} ± {np.std(rewards):.2f} over 3 episodes' in out
    status, again, _ = xagents_cli('play', 'ppo', '--env', 'CartPole-v1', '--weights', 'saved', '--episodes', '3')
    assert re.findall(r'Episode reward: (\S+)', again) == re.findall(r'Episode reward: (\S+)', out)


def test_periodic_saves_keep_the_newest_and_the_best_evaluated_agent(workdir):
    agent = PPO.from_env('CartPole-v1', seed=0, quiet=True, n_envs=2, n_steps=64)
    agent.fit(max_steps=1280, save_dir='saves', save_frequency=256, save_keep=2, eval_frequency=512, eval_episodes=2)
    names = sorted(os.listdir('saves'))
    assert names == ['best-eval', 'best-eval.json', 'step-000000001024', 'step-000000001280']
    assert PPO.load('saves/step-000000001280').steps == 1280
    best = PPO.load('saves/best-eval')
    assert best.steps in (512, 1024) and best.evaluate(2, seed=10_000).returns.shape == (2,)
    with pytest.raises(ValueError, match='save_frequency and save_replay_buffer need a save_dir'):
        agent.fit(max_steps=10, save_frequency=5)
    with pytest.raises(ValueError, match='PPO keeps no replay buffer to save'):
        agent.fit(max_steps=10, save_dir='saves', save_replay_buffer=True)


def test_a_save_dir_is_only_written_by_the_run_whose_saves_it_holds(workdir, xagents_cli):
    agent = PPO.from_env('CartPole-v1', seed=0, quiet=True, n_envs=2, n_steps=64)
    agent.fit(max_steps=512, save_dir='saves', save_frequency=256, eval_frequency=256, eval_episodes=2)
    saved = {name: open(f'saves/{name}/agent.json').read() for name in os.listdir('saves') if '.' not in name}
    status, _, err = xagents_cli('train', 'a2c', '--env', 'CartPole-v1', '--max-steps', '256', '--save-dir', 'saves',
                                 '--save-frequency', '128')
    assert status == 2 and err == ('xagents train a2c: error: save_dir saves holds the saves of another run: resume '
                                   'from one (--weights saves/step-...), or choose another directory\n')
    other = PPO.from_env('CartPole-v1', quiet=True, n_envs=2, n_steps=64)
    with pytest.raises(ValueError, match='save_dir saves holds the saves of another run'):
        other.fit(max_steps=256, save_dir='saves')
    other.fit(max_steps=128, save_dir='other', save_frequency=128)
    with pytest.raises(ValueError, match='save_dir other holds the saves of another run'):
        agent.fit(max_steps=128, save_dir='other')  # having trained already does not make other's saves its own
    assert {name: open(f'saves/{name}/agent.json').read() for name in os.listdir('saves') if '.' not in name} == saved
    # Resumed from its own save, the run goes on; best-eval is replaced only by a better evaluation than the
    # one recorded (here the highest CartPole-v1 has, so never).
    with open('saves/best-eval.json', 'w') as file:
        json.dump({'eval_reward': 500.0, 'step': 256}, file)
    agent.fit(max_steps=256, save_dir='saves', eval_frequency=128, eval_episodes=2)  # the same agent, in process
    resumed = PPO.load('saves/step-000000000512', quiet=True)
    resumed.fit(max_steps=256, save_dir='saves', save_frequency=128, eval_frequency=128, eval_episodes=2)
    assert open('saves/best-eval/agent.json').read() == saved['best-eval']
    assert 'step-000000000768' in os.listdir('saves')


def test_a_run_resumed_from_a_save_with_its_buffer_learns_at_once(workdir, xagents_cli):
    """The command line: --save-replay-buffer, then --weights of a periodic save."""
    status, _, err = xagents_cli('train', 'dqn', '--env', 'CartPole-v1', '--seed', '0', '--max-steps', '1024',
                                 '--save-dir', 'saves', '--save-frequency', '1024', '--save-replay-buffer',
                                 '--buffer-initial-size', '1000', '--quiet')
    assert status == 0, err
    resumed = DQN.load('saves/step-000000001024')
    assert resumed.buffer.steps == 1024
    before = int(resumed.gradient_updates.numpy())
    resumed.fit(max_steps=256)  # one update round: learning goes on at once
    assert int(resumed.gradient_updates.numpy()) == before + resumed.gradient_steps


@pytest.mark.parametrize('format', ['saved_model', 'onnx'])
def test_export_command_writes_a_policy_that_acts_as_predict(trained_ppo, workdir, xagents_cli, format):
    if format == 'onnx':
        pytest.importorskip('onnxruntime')
        pytest.importorskip('tf2onnx')
    from xagents.storage.export import load_exported

    trained_ppo.save('saved')
    status, out, err = xagents_cli('export', 'ppo', '--env', 'CartPole-v1', '--weights', 'saved',
                                   '--path', f'policy.{format}', '--format', format)
    assert status == 0 and f'Policy written to policy.{format}' in out, err
    assert 'Assets written' not in out + err and 'renamed' not in out + err  # TensorFlow's notes stay quiet
    observations = cartpole_observations()
    np.testing.assert_array_equal(load_exported(f'policy.{format}', format)(observations),
                                  trained_ppo.predict(observations)[0])
    status, _, err = xagents_cli('export', 'ppo', '--env', 'CartPole-v1', '--weights', 'saved',
                                 '--path', f'policy.{format}', '--format', format)
    assert status == 2 and err.strip().endswith(f'policy.{format} already exists: remove it or choose another '
                                                'path to export to')
    status, _, err = xagents_cli('export', 'ppo', '--env', 'CartPole-v1', '--weights', 'saved', '--path', 'p',
                                 '--format', 'pickle')
    assert status == 2 and "unknown export format 'pickle'" in err


def test_normalisation_statistics_learn_while_collecting_and_stay_frozen_outside_training(trained_ppo):
    stats = trained_ppo.observation_stats
    count, mean = stats.count, stats.mean.copy()
    assert count > 4096  # every observation collected went in
    trained_ppo.predict(cartpole_observations())
    trained_ppo.evaluate(2)
    trained_ppo.play(max_steps=20)
    assert stats.count == count and np.array_equal(stats.mean, mean)


def test_weights_trained_with_normalisation_are_refused_by_an_agent_without_it(trained_ppo, workdir):
    trained_ppo.save_models(['w.tf'])
    plain = PPO.from_env('CartPole-v1', quiet=True)
    with pytest.raises(ValueError, match=r'the model weights were trained with observation normalisation: build the '
                                         r'agent with normalize_observations \(--normalize-observations\)'):
        plain.load_weights(['w.tf'])


def test_the_command_line_plays_and_exports_weights_trained_with_normalisation(trained_ppo, workdir, xagents_cli):
    trained_ppo.save_models(['w.tf'])
    status, out, err = xagents_cli('play', 'ppo', '--env', 'CartPole-v1', '--weights', 'w.tf', '--max-steps', '20')
    assert status == 0 and 'Episode reward' in out, err
    status, _, err = xagents_cli('export', 'ppo', '--env', 'CartPole-v1', '--weights', 'w.tf', '--path', 'p.onnx',
                                 '--format', 'onnx')
    assert status == 0, err
    from xagents.storage.export import load_exported

    observations = cartpole_observations()  # the policy normalises as it was trained to, not as a plain agent
    np.testing.assert_array_equal(load_exported('p.onnx', 'onnx')(observations), trained_ppo.predict(observations)[0])


def test_an_agent_built_on_a_users_env_is_loaded_on_an_env_given_again(workdir):
    agent = PPO(gym.make('CartPole-v1'), quiet=True, n_steps=32, seed=0)
    agent.save('saved')
    with pytest.raises(ValueError, match='saved was trained on an env not made from an id: pass the env to load'):
        PPO.load('saved')
    with pytest.raises(ValueError, match=r"the agent's envs were not made from an id, so pass one \(evaluate"):
        xagents.evaluate(agent, episodes=1)
    with pytest.raises(ValueError, match=r"eval_frequency evaluates on envs made from the agent's env id"):
        agent.fit(max_steps=64, eval_frequency=32)  # refused before training, not at the first evaluation
    assert agent.steps == 0
    assert len(xagents.evaluate(agent, gym.make('CartPole-v1'), episodes=2).returns) == 2
    loaded = PPO.load('saved', env=gym.make('CartPole-v1'))
    observations = cartpole_observations(20)
    np.testing.assert_array_equal(loaded.predict(observations)[0], agent.predict(observations)[0])
    with pytest.raises(ValueError, match='comes from a run with observation space'):
        PPO.load('saved', env=gym.make('Acrobot-v1'))


def test_predict_takes_the_state_indices_of_a_discrete_observation_env():
    """FrozenLake gives integers; the agent learns on their one-hot vectors and predict accepts either."""
    agent = PPO.from_env('FrozenLake-v1', quiet=True, n_envs=2, seed=0)
    state, _ = gym.make('FrozenLake-v1').reset(seed=0)
    one_hot = np.eye(16, dtype=np.float32)
    assert agent.predict(state)[0] == agent.predict(one_hot[state])[0]
    np.testing.assert_array_equal(agent.predict(np.arange(16))[0], agent.predict(one_hot)[0])


@pytest.mark.parametrize('call, message', [
    (lambda: PPO(gym.make('CartPole-v1'), learning_rate=1e-3), "PPO got an unexpected parameter 'learning_rate': did you mean lr?"),
    (lambda: PPO(gym.make('CartPole-v1'), n_epochs=3), "PPO got an unexpected parameter 'n_epochs': did you mean ppo_epochs?"),
    (lambda: PPO(gym.make('CartPole-v1'), gae_lambda=0.9), "PPO got an unexpected parameter 'gae_lambda': did you mean lam?"),
    (lambda: PPO(gym.make('CartPole-v1'), verbose=0), "PPO got an unexpected parameter 'verbose': did you mean quiet"),
    (lambda: PPO(gym.make('CartPole-v1'), batch_size=64),
     "PPO got an unexpected parameter 'batch_size': did you mean mini_batches (a count: mini_batches = n_steps x n_envs / batch_size)?"),
    (lambda: DQN(gym.make('CartPole-v1'), batch_size=64), "DQN got an unexpected parameter 'batch_size': did you mean buffer_batch_size?"),
    (lambda: DQN(gym.make('CartPole-v1'), learning_starts=64), "DQN got an unexpected parameter 'learning_starts': did you mean buffer_initial_size?"),
    (lambda: A2C(gym.make('CartPole-v1'), gama=0.9), "A2C got an unexpected parameter 'gama': did you mean gamma?"),
    (lambda: A2C.from_env('CartPole-v1', ent_coef=0.0), "A2C got an unexpected parameter 'ent_coef': did you mean entropy_coef?"),
    (lambda: PPO(gym.make('CartPole-v1'), n_envs=2), "PPO takes envs already made, and n_envs is how envs are made"),
    (lambda: PPO('MlpPolicy', gym.make('CartPole-v1')), "agents take the env first and build their networks from .cfg files"),
    (lambda: PPO(gym.make('CartPole-v1'), quiet=True).fit(total_timesteps=100),
     "PPO.fit got an unexpected parameter 'total_timesteps': did you mean max_steps?"),
    (lambda: PPO(gym.make('CartPole-v1'), quiet=True).fit(max_steps=100, callback=[]),
     "PPO.fit got an unexpected parameter 'callback': did you mean callbacks?"),
    (lambda: PPO(gym.make('CartPole-v1'), quiet=True).evaluate(n_eval_episodes=3),
     "PPO.evaluate got an unexpected parameter 'n_eval_episodes'"),
])
def test_python_answers_a_wrong_parameter_name_as_the_command_line_does(call, message):
    """The Stable-Baselines3 names map to xagents' in Python as they do for flags (one table for both)."""
    with pytest.raises((TypeError, ValueError)) as error:
        call()
    assert message in str(error.value)


def keras_model(inputs: int, *units: int):
    """A user's Keras model: ``inputs`` features in, one Dense output per entry of ``units``."""
    from xagents.utils.quiet_tensorflow import tf

    observations = tf.keras.Input((inputs,))
    hidden = tf.keras.layers.Dense(16, activation='relu')(observations)
    outputs = [tf.keras.layers.Dense(size)(hidden) for size in units]
    return tf.keras.Model(observations, outputs if len(outputs) > 1 else outputs[0])


@pytest.mark.parametrize('make, message', [
    (lambda: PPO(gym.make('CartPole-v1'), model=keras_model(4, 3, 1)),
     "PPO's model: expected outputs policy (2 units), value (1 units), got 2 output(s) of size 3, 1"),
    (lambda: PPO(gym.make('CartPole-v1'), model=keras_model(4, 2)),  # no value head
     "PPO's model: expected outputs policy (2 units), value (1 units), got 1 output(s) of size 2"),
    (lambda: DQN(gym.make('CartPole-v1'), model=keras_model(4, 3)),
     "DQN's model: expected outputs q (2 units), got 1 output(s) of size 3"),
    (lambda: DQN(gym.make('CartPole-v1'), model=keras_model(6, 2)),
     "DQN's model: expected it to take observations shaped (4,), calling it failed"),
])
def test_a_users_keras_model_is_checked_when_the_agent_is_built(make, message):
    with pytest.raises(ValueError) as error:
        make()
    assert str(error.value).startswith(message)
    assert DQN(gym.make('CartPole-v1'), model=keras_model(4, 2), quiet=True).models['model'].name  # a fitting one is taken


def test_a_run_and_an_evaluation_print_usefully_and_an_evaluation_unpacks_as_mean_and_std():
    agent = PPO.from_env('CartPole-v1', seed=0, n_envs=2, n_steps=64, reward_buffer_size=5, quiet=True)
    run = agent.fit(max_steps=1280)
    assert repr(run) == (f'Run(PPO, steps=1280, games={run.games}, mean_reward={run.mean_reward:.2f}, '
                         f'best_reward={run.best_reward:.2f}, eval_reward=n/a: Maximum steps (1280) reached; '
                         f'best mean reward {run.best_reward:.2f})')
    result = agent.evaluate(episodes=4)
    mean, std = result  # as Stable-Baselines3's evaluate_policy
    assert (mean, std) == (result.mean, result.std) == (np.mean(result.returns), np.std(result.returns))
    assert repr(result) == (f'EvaluationResult(mean={mean:.2f}, std={std:.2f}, episodes=4, '
                            f'mean_length={np.mean(result.lengths):.1f})')


class Endless(gym.Env):
    """An env whose episodes never end (no time limit of its own): one reward per step."""

    observation_space = gym.spaces.Box(-1, 1, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        return np.zeros(2, np.float32), 1.0, False, False, {}


def test_evaluation_cuts_episodes_that_never_end_and_says_so(caplog):
    agent = PPO(Endless(), quiet=True, n_steps=8, seed=0)
    result = agent.evaluate(episodes=3, env=Endless(), max_episode_steps=50)
    assert result.lengths.tolist() == [50, 50, 50] and result.returns.tolist() == [50.0] * 3
    assert 'Evaluation cut 3 of 3 episodes at 50 steps' in caplog.text
    gym.register('EndlessForTest-v0', entry_point=Endless)  # an id with no max_episode_steps
    try:
        agent = PPO.from_env('EndlessForTest-v0', quiet=True, n_steps=8, seed=0)
        result = agent.evaluate(episodes=2, max_episode_steps=30)  # cut inside the env, below its records
        assert result.lengths.tolist() == [30, 30] and result.returns.tolist() == [30.0, 30.0]
        from xagents.training.evaluation import STEP_LIMIT
        assert STEP_LIMIT == 100_000  # the documented default where the env sets no limit
    finally:
        gym.registry.pop('EndlessForTest-v0')
