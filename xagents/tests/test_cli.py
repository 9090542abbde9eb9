"""The command line as a user meets it: help, one-line errors with exit status 2, the README's run."""
import os
import subprocess
import sys

import cv2
import numpy as np
import pandas as pd
import pytest

import xagents
from xagents.registry import AGENTS
from xagents.storage.history import plot_history


def test_bare_command_prints_version_usage_and_commands(xagents_cli):
    status, out, _ = xagents_cli()
    assert status == 0
    assert f'xagents {xagents.__version__}' in out and xagents.__version__ >= '2' and 'usage: xagents <command>' in out
    for command in ('train', 'play', 'export', 'plot', 'tune', 'benchmark'):
        assert any(line.split()[:1] == [command] and len(line.split()) > 1 for line in out.splitlines()), command


@pytest.mark.parametrize('command', ['plot', 'tune', 'benchmark'])
def test_a_command_without_flags_prints_its_usage(xagents_cli, command):
    status, out, err = xagents_cli(command)
    assert status == 0, err
    assert out.startswith(f'usage: xagents {command}') and '--' in out


def test_train_lists_general_and_training_flags_only(xagents_cli):
    status, out, _ = xagents_cli('train')
    assert status == 0
    for flag in ('--env', '--n-envs', '--seed', '--lr', '--target-reward', '--max-steps', '--checkpoints',
                 '--history-checkpoint', '--weights', '--monitor-session', '--tensorboard', '--quiet'):
        assert flag in out, flag
    assert '--clip-range' not in out
    assert '--callbacks' not in out  # Python objects: fit(callbacks=...) only
    # lr is 3e-4 for PPO, 7e-4 for A2C, 1e-3 for TRPO...: no one default without an agent
    lr_help = ' '.join(out.split('\n  --lr X')[1].split('--lr-decay-steps')[0].split())
    assert lr_help == 'Learning rate. (default: per agent, see xagents train AGENT)'


@pytest.mark.parametrize('agent, listed', [('ppo', True), ('a2c', True), ('sac', True), ('trpo', False)])
def test_gsde_flags_are_listed_only_for_agents_that_explore_with_it(xagents_cli, agent, listed):
    status, out, _ = xagents_cli('train', agent)
    assert status == 0 and ('--use-sde' in out) == listed and ('--sde-sample-freq' in out) == listed


def test_callbacks_are_no_flag(xagents_cli):
    status, _, err = xagents_cli('train', 'ppo', '--env', 'CartPole-v1', '--max-steps', '500', '--callbacks', 'cb.py')
    assert status == 2 and 'unrecognized arguments: --callbacks' in err and 'Traceback' not in err


def test_agent_help_lists_every_constructor_parameter_with_default(xagents_cli):
    from xagents.agent.base import BaseAgent
    from xagents.app.flags import constructors, flags_of

    status, out, _ = xagents_cli('train', 'ppo')
    assert status == 0
    for flag in flags_of(constructors(__import__('xagents').PPO, BaseAgent) + [BaseAgent.__init__]):
        assert flag.option in out, flag.option
    help_text = ' '.join(out.split())  # the default by spaces
    assert '--ppo-epochs N' in out and "(default: 10; Atari's 4 for image observations with discrete actions)" in help_text
    assert '--clip-range X' in out and '(default: 0.2)' in out


# Each agent's defaults as its paper and reference implementations give them, written out here rather
# than recomputed from the signatures, with an env that has no tuned entry for the agent.
REFERENCE_DEFAULTS = {
    'ppo': ('Acrobot-v1', {'lr': 3e-4, 'lam': 0.95, 'clip_range': 0.2, 'gamma': 0.99}),  # the rest by action space
    'a2c': ('Acrobot-v1', {'lr': 7e-4, 'n_steps': 5, 'entropy_coef': 0.01, 'rmsprop_alpha': 0.99,
                           'rmsprop_epsilon': 1e-5}),
    'acer': ('Acrobot-v1', {'lr': 7e-4, 'n_steps': 20, 'replay_ratio': 4.0, 'importance_c': 10.0, 'delta': 1.0}),
    'trpo': ('Acrobot-v1', {'lr': 1e-3, 'max_kl': 0.01, 'cg_damping': 0.1}),
    'dqn': ('Taxi-v4', {'tau': 1.0, 'grad_norm': 10.0, 'gamma': 0.99}),  # the rest by observation space
    'ddpg': ('InvertedPendulum-v5', {'lr': 1e-3, 'tau': 0.005}),
    'td3': ('InvertedPendulum-v5', {'lr': 1e-3, 'policy_delay': 2, 'policy_noise_coef': 0.2, 'noise_clip': 0.5}),
    'sac': ('InvertedPendulum-v5', {'lr': 3e-4, 'tau': 0.005, 'buffer_batch_size': 256}),
}


@pytest.mark.parametrize('agent', list(REFERENCE_DEFAULTS))
def test_help_shows_the_defaults_each_agent_uses(agent):
    """``xagents train AGENT -h`` shows the agent's own defaults, and a built agent trains with them."""
    from xagents.app.cli import build_parser
    from xagents.registry import agent_class

    env_id, defaults = REFERENCE_DEFAULTS[agent]
    shown = {action.dest: action.help for action in build_parser('train', agent)._actions
             if action.help != '==SUPPRESS=='}  # not the hidden old names of renamed flags
    for name, value in defaults.items():
        assert shown[name].endswith(f'(default: {value})'), (name, shown[name])
    built = agent_class(agent).from_env(env_id, quiet=True)
    for optimizer in built.optimizers.values():
        assert 'lr' not in defaults or float(optimizer.learning_rate) == pytest.approx(defaults['lr'])
    for name in ('tau', 'grad_norm', 'gamma'):
        assert name not in defaults or getattr(built, name) == defaults[name]
    built.envs.close()


@pytest.mark.parametrize('argv, message', [
    (['fly'], "unknown command 'fly'"),
    (['train', 'ddqn'], "unknown agent 'ddqn'"),
    (['train', 'ppo', '--env', 'CartPol-v1', '--max-steps', '10'], "unknown environment id 'CartPol-v1'"),
    (['train', 'ppo', '--env', 'CartPole-v1'], 'expected target_reward or max_steps'),
    (['train', 'ppo', '--env', 'CartPole-v1', '--max-steps', '100', '--checkpoints', 'a.tf', 'b.tf'],
     'trains 1 model(s) (model), got 2 checkpoint path(s)'),
    (['train', 'ppo', '--env', 'CartPole-v1', '--max-steps', '100', '--weights', 'missing.tf'],
     'weights file not found: missing.tf'),
    (['train', 'ppo', '--env', 'CartPole-v1', '--max-steps', '0'], 'expected max_steps >= 1, got 0'),
    (['train', 'ppo', '--env', 'CartPole-v1', '--max-steps', '10', '--n-envs', '0'], 'expected n_envs >= 1, got 0'),
    (['train', 'a2c', '--env', 'CartPole-v1', '--max-steps', '10', '--n-steps', '-5'], 'expected n_steps >= 1, got -5'),
    (['train', 'ppo', '--env', 'CartPole-v1', '--max-steps', '10', '--mini-batches', '3'],
     'expected mini_batches to divide n_steps * n_envs = 256, got 3'),
    (['train', 'ppo', '--env', 'CartPole-v1', '--max-steps', '10', '--n-step', '5'], 'unrecognized arguments: --n-step'),
    (['train', 'ppo', '--env', 'CartPole-v1', '--max-steps', '10', '--lr', 'fast'], "invalid float value: 'fast'"),
    (['train', 'ppo', '--max-steps', '10'], 'the following arguments are required: --env'),
    (['play', 'ppo', '--env', 'CartPole-v1'], '--weights is required'),
    (['train', '--env', 'CartPole-v1'], 'expected an agent (a2c, ppo'),
    (['plot', 'missing.parquet', '--env', 'CartPole-v1', '--output', 'x.png'], 'history file not found'),
])
def test_bad_input_is_one_line_with_status_2(xagents_cli, workdir, argv, message):
    status, out, err = xagents_cli(*argv)
    assert status == 2
    assert message in err
    assert len(err.strip().splitlines()) == 1, err
    assert 'Traceback' not in err and 'usage:' not in err


def test_malformed_cfg_names_file_section_and_key(xagents_cli, workdir):
    with open('bad.cfg', 'w') as file:
        file.write('[dense-1]\nunits=64\nactivaton=relu\n[dense-2]\noutput=1\n[dense-3]\nunits=1\noutput=1\n')
    status, _, err = xagents_cli('train', 'ppo', '--env', 'CartPole-v1', '--max-steps', '10',
                              '--model', 'bad.cfg')
    assert status == 2
    assert 'bad.cfg: [dense-1] activaton: unknown key' in err and len(err.strip().splitlines()) == 1


def test_existing_files_are_never_overwritten_without_resume(xagents_cli, workdir):
    for name in ('old.tf', 'old.parquet'):
        with open(name, 'wb') as file:
            file.write(b'precious')
    pd.DataFrame({'mean_reward': [1.0], 'best_reward': [1.0], 'episode_reward': [1.0], 'step': [8],
                  'time': [0.1]}).to_parquet('old.parquet')
    history = open('old.parquet', 'rb').read()
    status, _, err = xagents_cli('train', 'ppo', '--env', 'CartPole-v1', '--max-steps', '500',
                              '--checkpoints', 'old.tf')
    assert status == 2 and 'checkpoint old.tf exists' in err
    status, _, err = xagents_cli('train', 'ppo', '--env', 'CartPole-v1', '--max-steps', '500',
                              '--history-checkpoint', 'old.parquet')
    assert status == 2 and 'history old.parquet exists' in err
    assert open('old.tf', 'rb').read() == b'precious'
    assert open('old.parquet', 'rb').read() == history


def test_a_progress_line_is_not_repeated_when_the_run_ends_on_it(xagents_cli, workdir):
    status, out, err = xagents_cli('train', 'sac', '--env', 'Pendulum-v1', '--max-steps', '1000', '--log-frequency', '5')
    assert status == 0, err  # 5 episodes of 200 steps: the last one makes a line, then the run ends
    assert out.count('games 5 ') == 1 and out.count(' steps 1000 ') == 1


def test_a_run_that_finishes_no_episode_says_it_wrote_no_weights(xagents_cli, workdir):
    status, out, err = xagents_cli('train', 'ppo', '--env', 'MountainCar-v0', '--n-envs', '1', '--n-steps', '16',
                                   '--max-steps', '32', '--checkpoints', 'w.tf')  # its episodes last 200 steps
    assert status == 0, err
    assert 'No episode finished: no weights written to w.tf' in out and not os.path.exists('w.tf')


def test_readme_sequence_train_plot_play(workdir, xagents_command):
    """The README's first run, verbatim, through the installed command line."""
    train = subprocess.run(
        xagents_command + ['train', 'ppo', '--env', 'CartPole-v1', '--target-reward', '475', '--checkpoints',
                           'ppo-cartpole.tf', '--history-checkpoint', 'ppo-cartpole.parquet', '--seed', '0'],
        capture_output=True, text=True, timeout=600,
    )
    assert train.returncode == 0, train.stderr[-2000:]
    assert train.stdout.strip().splitlines()[-1].startswith('Reward achieved in ')
    history = pd.read_parquet('ppo-cartpole.parquet')
    assert list(history.columns) == ['mean_reward', 'best_reward', 'episode_reward', 'step', 'time']
    assert history['mean_reward'].iloc[-1] >= 475
    figure = plot_history(['ppo-cartpole.parquet'], ['PPO'], 'CartPole-v1', history_interval=100,
                          output='curves.png')
    assert len(figure.axes) == 2 and len(figure.axes[0].lines) == 1
    assert len(figure.axes[0].lines[0].get_xdata()) == len(history[::100])
    assert os.path.getsize('curves.png') > 10_000
    play = subprocess.run(
        xagents_command + ['play', 'ppo', '--env', 'CartPole-v1', '--weights', 'ppo-cartpole.tf', '--video-dir', 'video',
                   '--seed', '0'],
        capture_output=True, text=True, timeout=300,
    )
    assert play.returncode == 0, play.stderr[-2000:]
    reward = float(play.stdout.strip().splitlines()[-1].split(': ')[1])
    assert reward >= 150  # an untrained policy balances ~10-40 steps
    (video,) = os.listdir('video')
    capture = cv2.VideoCapture(os.path.join('video', video))
    frames = int(capture.get(cv2.CAP_PROP_FRAME_COUNT))
    assert video.endswith('.mp4') and capture.read()[0] and abs(frames - reward) <= 1  # the whole episode, a frame a step


def test_plot_command_writes_image(xagents_cli, workdir):
    pd.DataFrame({'mean_reward': [1.0, 2.0, 3.0], 'best_reward': [1.0, 2.0, 3.0],
                  'episode_reward': [1.0, 3.0, 5.0], 'step': [10, 20, 30], 'time': [0.1, 0.2, 0.3]}
                 ).to_parquet('h.parquet')
    status, out, _ = xagents_cli('plot', 'h.parquet', 'h.parquet', '--labels', 'A', 'B',
                              '--env', 'CartPole-v1', '--output', 'curves.png')
    assert status == 0 and os.path.getsize('curves.png') > 10_000
    status, _, err = xagents_cli('plot', 'h.parquet', '--labels', 'A', 'B', '--env', 'X', '--output', 'c.png')
    assert status == 2 and 'expected one label per history file (1), got 2' in err


def test_every_agent_flag_has_help_text(xagents_cli):
    from xagents.app.cli import agent_flags, play_flags, training_flags

    for agent in AGENTS:
        for flag in agent_flags(agent) + training_flags() + play_flags():
            assert flag.help, f'{agent}: {flag.option} has no help'


def run_without_tensorflow_check(*argv: str) -> tuple[int, bool, str]:
    """Run ``xagents ARGV`` in a fresh Python; return (exit status, whether TensorFlow got loaded, stderr)."""
    script = ('import sys\nfrom xagents.app.cli import main\ntry:\n    main(sys.argv[1:])\n    code = 0\n'
              'except SystemExit as exit_:\n    code = exit_.code\n'
              "sys.stdout.write(f'\\n{code} {\"tensorflow\" in sys.modules}\\n')\n")
    result = subprocess.run([sys.executable, '-c', script, *argv], capture_output=True, text=True, timeout=120)
    code, loaded = result.stdout.split()[-2:]
    return int(code), loaded == 'True', result.stderr


@pytest.mark.parametrize('argv, status', [
    (['train'], 0), (['play'], 0), (['train', 'ppo'], 0), (['train', 'sac', '--env', 'Pendulum-v1', '-h'], 0),
    (['train', 'dqn', '--env', 'CartPole-v1', '--lr', 'fast'], 2), (['train', 'ppo', '--lrr', '1'], 2),
    (['train', 'ddqn'], 2), (['fly'], 2), (['play', 'td3', '--env', 'Pendulum-v1', '--frame-frequency', 'x'], 2),
    (['train', 'ddpg', '--env', 'Pendulum-v1', '--noise-type', 'pink_0.1'], 2),  # DDPG's own syntax, from its cli.py
])
def test_help_and_flag_errors_need_no_tensorflow(argv, status):
    """Loading TensorFlow takes seconds: help and misspelt flags are answered before it."""
    code, loaded, _ = run_without_tensorflow_check(*argv)
    assert (code, loaded) == (status, False)


@pytest.mark.parametrize('agent', AGENTS)
def test_flags_read_from_source_equal_the_imported_signatures(agent):
    from xagents.agent.base import BaseAgent
    from xagents.app.cli import agent_flags, play_flags, training_flags
    from xagents.registry import agent_class
    from xagents.app.flags import constructors, flags_of

    assert agent_flags(agent) == flags_of(constructors(agent_class(agent), BaseAgent))
    assert training_flags() == flags_of([BaseAgent.__init__, BaseAgent.fit, BaseAgent.load_weights], skip={'seed'})
    assert play_flags() == flags_of([BaseAgent.play, BaseAgent.load_weights], skip={'env_id', 'seed'})


@pytest.mark.parametrize('agent, flag, suggestion', [
    ('ppo', '--learning-rate', '--lr'), ('ppo', '--ent-coef', '--entropy-coef'), ('ppo', '--n-epochs', '--ppo-epochs'),
    ('ppo', '--gama', '--gamma'), ('ppo', '-n', '--max-steps'),  # RL Zoo's -n N
    ('ppo', '--batch-size', '--mini-batches (a count: n_steps x n_envs / batch size)'),
    ('dqn', '--batch-size', '--buffer-batch-size'), ('dqn', '--verbose', '--quiet'),
])
def test_a_misspelt_or_sb3_named_flag_gets_a_suggestion(xagents_cli, agent, flag, suggestion):
    status, _, err = xagents_cli('train', agent, '--env', 'CartPole-v1', flag, '1')
    assert status == 2 and err == (f'xagents train {agent}: error: unrecognized arguments: {flag} 1 '
                                   f'(did you mean {suggestion}?)\n')


def test_help_with_an_env_shows_the_defaults_tuned_for_it(xagents_cli):
    _, out, _ = xagents_cli('train', 'ppo', '--env', 'CartPole-v1', '-h')
    flat = ' '.join(out.split())
    assert '--lr X Learning rate. [tuned for CartPole-v1] (default: 0.003)' in flat
    assert '--n-envs N Number of environments stepped together. [tuned for CartPole-v1] (default: 8)' in flat
    _, out, _ = xagents_cli('train', 'ppo', '--env', 'Acrobot-v1', '-h')
    assert '--lr X Learning rate. (default: 0.0003)' in ' '.join(out.split())


def test_every_play_flag_has_help(xagents_cli):
    from xagents.app.cli import build_parser

    for action in build_parser('play', 'ppo')._actions:
        assert action.help and action.help.strip(), action.dest


def test_a_python_script_shows_progress_and_no_tensorflow_noise(workdir):
    script = ("from xagents import PPO\n"
              "PPO.from_env('CartPole-v1', seed=0, n_envs=2).fit(max_steps=2000)\n")
    env = {key: value for key, value in os.environ.items() if key != 'TF_CPP_MIN_LOG_LEVEL'}
    result = subprocess.run([sys.executable, '-c', script], capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr
    assert 'mean reward' in result.stdout and 'Maximum steps (2000) reached' in result.stdout
    assert result.stderr == ''


@pytest.mark.parametrize('module', ['xagents.utils.common', 'xagents.app.tuning', 'xagents.agent.base',
                                    'xagents.storage.export'])
def test_importing_a_module_the_readme_names_prints_no_tensorflow_noise(module):
    env = {key: value for key, value in os.environ.items() if key != 'TF_CPP_MIN_LOG_LEVEL'}
    result = subprocess.run([sys.executable, '-c', f'import {module}; from xagents import PPO'], capture_output=True,
                            text=True, env=env, timeout=300)
    assert result.returncode == 0 and result.stderr == '', result.stderr


@pytest.mark.parametrize('collecting', [True, False])
def test_tensorflow_loads_with_garbage_collection_paused_then_as_the_program_had_it(collecting):
    """It loads faster with the collector off; left off, every reference cycle of a long run would leak."""
    script = ("import gc\n"
              f"{'' if collecting else 'gc.disable()'}\n"
              "from xagents import PPO\n"
              "print(gc.isenabled(), gc.get_freeze_count())\n")
    result = subprocess.run([sys.executable, '-c', script], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    enabled, frozen = result.stdout.split()
    assert enabled == str(collecting)
    assert int(frozen) > 100_000  # TensorFlow's objects, kept out of every later collection


def test_an_atari_run_prints_neither_leak_reports_nor_the_ale_banner(workdir):
    """The command line loads ale-py before TensorFlow; frozen with TensorFlow's objects, ale-py's extension
    (nanobind) printed 'leaked 16 instances!' and more at every Atari run's exit. ALE's banner ('A.L.E: Arcade
    Learning Environment ...') printed once per env process, in the middle of progress output."""
    result = subprocess.run([sys.executable, '-m', 'xagents', 'train', 'ppo', '--env', 'PongNoFrameskip-v4',
                             '--n-envs', '2', '--max-steps', '256'], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert 'Maximum steps (256) reached' in result.stdout + result.stderr and 'leaked' not in result.stderr
    assert 'Arcade Learning Environment' not in result.stdout + result.stderr


def test_exporting_an_atari_policy_prints_no_leak_report(workdir):
    """The traced policy holds the agent (and its ALE envs) in a reference cycle, alive at exit."""
    made = subprocess.run([sys.executable, '-c', "from xagents import PPO\n"
                           "PPO.from_env('PongNoFrameskip-v4', n_envs=2, quiet=True).save('saved')"],
                          capture_output=True, text=True, timeout=300)
    assert made.returncode == 0, made.stderr
    result = subprocess.run([sys.executable, '-m', 'xagents', 'export', 'ppo', '--env', 'PongNoFrameskip-v4',
                             '--weights', 'saved', '--path', 'pong.onnx'], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and 'Policy written to pong.onnx' in result.stdout, result.stderr
    assert 'leaked' not in result.stderr


@pytest.mark.parametrize('agent', AGENTS)
def test_every_tuned_default_names_a_parameter_of_its_agent_or_of_fit(agent):
    import inspect
    import json

    from xagents.registry import agent_class

    klass = agent_class(agent)
    known = klass.parameter_names() | set(inspect.signature(klass.fit).parameters)  # a preset may set fit's defaults
    table = json.loads(open(os.path.join(os.path.dirname(__import__('xagents').__file__), agent,
                                         'hyperparameters.json')).read())
    for entry, settings in table.items():
        assert set(settings) <= known, (entry, set(settings) - known)


def hidden_units(model) -> list[int]:
    """Units of the model's hidden (non-linear) dense layers, in order."""
    return [layer.units for layer in model.layers if hasattr(layer, 'units') and layer.activation.__name__ != 'linear']


def test_ppos_atari_preset_anneals_over_rl_zoos_10m_steps_with_adam_epsilon_1e5():
    """RL Zoo's Atari PPO decays lr 2.5e-4 linearly over its 10M steps; SB3's and CleanRL's Adam take epsilon 1e-5."""
    from xagents import PPO

    agent = PPO.from_env('PongNoFrameskip-v4', n_envs=2, seed=0, quiet=True)
    assert agent.optimizer.epsilon == pytest.approx(1e-5)
    for steps, rate in ((0, 2.5e-4), (2_500_000, 1.875e-4), (10_000_000, 0.0)):
        agent.steps = steps
        agent.update_learning_rates()
        assert float(agent.optimizer.learning_rate) == pytest.approx(rate)
    agent.envs.close()


def test_mujoco_presets_build_rl_zoos_networks_from_packaged_cfgs_and_initial_log_std(workdir):
    """A preset names a packaged cfg by its file name; PPO's log_std starts where the preset says."""
    from xagents import DDPG, PPO, SAC, TD3

    sac = SAC.from_env('Hopper-v5', seed=0)
    assert hidden_units(sac.actor) == [256, 256] and hidden_units(sac.critic) == [256, 256, 256, 256]
    td3 = TD3.from_env('Hopper-v5', seed=0)
    assert hidden_units(td3.actor)[:2] == [400, 300] and sorted(hidden_units(td3.critic)) == [300, 300, 400, 400]
    ddpg = DDPG.from_env('LunarLanderContinuous-v3', seed=0)
    assert hidden_units(ddpg.actor)[:2] == [400, 300] and sorted(hidden_units(ddpg.critic)) == [300, 400]
    ppo = PPO.from_env('Hopper-v5', seed=0)
    assert np.allclose(ppo.model.log_std.numpy(), -2.0) and hidden_units(ppo.model) == [256, 256, 256, 256]
    assert np.allclose(PPO.from_env('Pendulum-v1').model.log_std.numpy(), 0.0)
    for agent in (sac, td3, ddpg, ppo):
        agent.envs.close()
    with pytest.raises(ValueError, match=r'^SAC ships no ann-actor-3\.cfg: pass a model'):
        SAC.from_env('Pendulum-v1', actor_model='ann-actor-3.cfg')


def test_a_misspelt_tuned_default_is_one_line(workdir):
    from xagents import PPO

    class Misspelt(PPO):
        @classmethod
        def default_hyperparameters(cls, env_id):
            return {'n_step': 64}

    with pytest.raises(ValueError, match=r"^Misspelt's hyperparameters.json sets 'n_step' for CartPole-v1, which is "
                                         r"none of its parameters$"):
        Misspelt.from_env('CartPole-v1')


@pytest.mark.parametrize('agent', AGENTS)
def test_each_agent_cli_module_gives_examples_that_parse(agent, xagents_cli):
    """An agent's cli.py is its command-line face: its examples are shown under its flags, and parse."""
    from xagents.app.cli import build_parser
    from xagents.registry import agent_cli

    examples = agent_cli(agent).EXAMPLES
    status, out, _ = xagents_cli('train', agent)
    assert status == 0 and examples and all(example in out for example in examples)
    for example in examples:
        words = example.split()
        assert words[:3] == ['xagents', 'train', agent]
        build_parser('train', agent).parse_args(words[3:])  # exits with status 2 on a flag that does not parse


def test_an_optional_dependency_a_run_needs_is_checked_before_anything_is_made(workdir):
    """TensorBoard made unimportable (as where its extra is not installed): one line with the command that
    installs this xagents' extra (the package index's xagents is another project), exit 2, no folder made."""
    script = ("import sys; sys.modules['tensorboard'] = None; from xagents.app.cli import main; "
              "main(['train', 'ppo', '--env', 'CartPole-v1', '--tensorboard', 'tb', '--max-steps', '100'])")
    result = subprocess.run([sys.executable, '-c', script], capture_output=True, text=True, timeout=300)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [
        "xagents train ppo: error: writing TensorBoard summaries needs the tensorboard package: pip install "
        "'tensorboard>=2.16'"]
    assert os.listdir('.') == []


def test_install_commands_name_this_xagents_extras_requirements():
    from xagents.utils.extras import install_command

    assert install_command('export') == ("pip install 'tf2onnx>=1.17' 'onnx>=1.23' 'onnxruntime>=1.32' "
                                         "'ai-edge-litert>=2.3'")
    assert 'xagents[' not in install_command('postgres') and 'psycopg2-binary' in install_command('postgres')


MY_NETWORKS = '''
import keras


def dense():
    """A CartPole Q-network, built on whichever backend runs; it leaves a file saying it was called."""
    open('dense-called', 'w').close()
    inputs = keras.Input((4,))
    return keras.Model(inputs, keras.layers.Dense(2)(keras.layers.Dense(16, activation='relu')(inputs)))


class NeedsUnits:
    def __init__(self, units):
        self.units = units


made = dense()
'''


@pytest.fixture
def my_networks(workdir):
    """A user's module of networks, my_networks.py, in the working directory (imported afresh by each test)."""
    import importlib

    (workdir / 'my_networks.py').write_text(MY_NETWORKS)
    importlib.invalidate_caches()
    sys.modules.pop('my_networks', None)
    yield workdir
    sys.modules.pop('my_networks', None)


@pytest.mark.backends
@pytest.mark.parametrize('given', ['my_networks:dense', 'my_networks.py:dense', 'my_networks:made'])
def test_model_takes_a_network_of_yours_as_module_colon_name(my_networks, xagents_cli, given):
    status, out, err = xagents_cli('train', 'dqn', '--env', 'CartPole-v1', '--model', given, '--max-steps', '200',
                                   '--no-save', '--seed', '0')
    assert status == 0, err
    assert 'Maximum steps (200) reached' in out and os.path.exists('dense-called')


@pytest.mark.parametrize('argv, message', [
    (['dqn', '--model', 'nowhere_networks:dense'], "cannot import 'nowhere_networks' for --model "
                                                    "nowhere_networks:dense: ModuleNotFoundError"),
    (['dqn', '--model', 'my_networks:absent'], 'my_networks has no absent for --model my_networks:absent'),
    (['dqn', '--model', 'my_networks:NeedsUnits'], "--model my_networks:NeedsUnits: calling NeedsUnits() failed: "
                                                   "TypeError"),
    (['sac', '--env', 'Pendulum-v1', '--critic-model', 'my_networks:absent'], 'for --critic-model'),
])
def test_a_network_name_that_gives_no_network_is_one_line(my_networks, xagents_cli, argv, message):
    env = [] if '--env' in argv else ['--env', 'CartPole-v1']
    status, _, err = xagents_cli('train', *argv, *env, '--max-steps', '200')
    assert status == 2 and message in err and len(err.strip().splitlines()) == 1, err
    assert not os.path.exists('runs')  # refused before the run folder is made


def test_network_flags_say_they_take_module_colon_name(xagents_cli):
    status, out, _ = xagents_cli('train', 'sac')
    help_of = {flag: ' '.join(out.split(f'\n  {flag} S')[1].split('\n  --')[0].split())
               for flag in ('--actor-model', '--critic-model')}
    assert status == 0 and all('module:Name, a network of yours' in text for text in help_of.values()), help_of


def test_a_tune_trial_builds_a_network_named_as_module_colon_name(my_networks):
    from xagents.app import tuning
    from xagents.registry import agent_class

    values = list(tuning.train_trial(agent_class('dqn'), 'CartPole-v1', {'model': 'my_networks:dense', 'seed': 0},
                                     trial_steps=200, n_reports=1, eval_episodes=1))
    assert len(values) == 1 and os.path.exists('dense-called')
