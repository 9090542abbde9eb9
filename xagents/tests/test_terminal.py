"""Training in a real terminal: a pseudo-terminal, where the progress bar is drawn (pipes never see it); and output
piped into a program that stops reading (``| head``), which ends the command quietly."""
from __future__ import annotations

import fcntl
import os
import pty
import select
import signal
import struct
import subprocess
import sys
import termios
import time

import pytest


def run_in_terminal(argv: list[str], timeout: float = 300) -> tuple[int, str]:
    """Run ``argv`` with a pseudo-terminal as stdin, stdout and stderr; return (exit status, what it showed)."""
    controller, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack('HHHH', 40, 120, 0, 0))  # 40 rows, 120 columns
    environment = {**os.environ, 'TF_CPP_MIN_LOG_LEVEL': '3', 'TERM': 'xterm'}
    process = subprocess.Popen(argv, stdin=terminal, stdout=terminal, stderr=terminal, env=environment,
                               start_new_session=True)
    os.close(terminal)
    shown, deadline = [], time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if select.select([controller], [], [], 0.5)[0]:
                try:
                    data = os.read(controller, 65536)
                except OSError:  # EIO: every holder of the terminal closed it
                    break
                if not data:
                    break
                shown.append(data)
            elif process.poll() is not None:
                break
        else:
            process.kill()
            pytest.fail(f'{argv} did not finish in {timeout} s')
    finally:
        os.close(controller)
    return process.wait(timeout=30), b''.join(shown).decode(errors='replace')


def test_training_from_the_command_line_in_a_terminal_draws_a_bar_and_reaches_the_target(workdir, xagents_command):
    status, shown = run_in_terminal(xagents_command + ['train', 'ppo', '--env', 'CartPole-v1', '--target-reward',
                                                       '150', '--seed', '0', '--checkpoints', 'w.tf'])
    assert status == 0, shown[-2000:]
    assert 'Traceback' not in shown and 'Reward achieved in ' in shown
    assert 'step/s' in shown  # the progress bar was drawn
    assert os.path.getsize('w.tf') > 0


def test_training_from_a_python_script_in_a_terminal_draws_a_bar(workdir):
    script = ("from xagents import PPO\n"
              "agent = PPO.from_env('CartPole-v1', seed=0)\n"
              "run = agent.fit(target_reward=150)\n"
              "print('mean reward', run.mean_reward)\n")
    status, shown = run_in_terminal([sys.executable, '-c', script])
    assert status == 0, shown[-2000:]
    assert 'Traceback' not in shown and 'step/s' in shown
    assert float(shown.rsplit('mean reward', 1)[1].split()[0]) >= 150


def run_into_closed_pipe(argv: list[str], lines: int, timeout: float = 120) -> tuple[int, str, float]:
    """Run ``argv`` with stdout a pipe whose reader closes it after ``lines`` lines, as ``| head`` does; return (exit
    status, stderr, seconds from the close to the exit)."""
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               env={**os.environ, 'TF_CPP_MIN_LOG_LEVEL': '3'})
    for _ in range(lines):
        assert process.stdout.readline(), f'{argv} ended before writing {lines} lines'
    process.stdout.close()
    closed = time.monotonic()
    try:
        status = process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        pytest.fail(f'{argv} went on {timeout} s after its output was closed')
    return status, process.stderr.read().decode(errors='replace'), time.monotonic() - closed


@pytest.mark.parametrize('argv', [['--help'], ['train'], ['train', 'ppo'], ['tune'], ['plot'],
                                  ['check-env', 'CartPole-v1']], ids=' '.join)
def test_output_into_a_closed_pipe_ends_quietly_with_sigpipes_status(xagents_command, argv):
    status, err, _ = run_into_closed_pipe(xagents_command + argv, lines=0)
    assert (status, err) == (141, '')


def test_a_run_piped_to_head_stops_once_head_has_its_lines_keeping_its_files(workdir, xagents_command):
    status, err, seconds = run_into_closed_pipe(xagents_command + [
        'train', 'ppo', '--env', 'CartPole-v1', '--seed', '0', '--max-steps', '1000000', '--checkpoints', 'w.tf',
        '--history-checkpoint', 'h.parquet'], lines=2)
    assert (status, err) == (141, '')
    assert seconds < 30  # the next progress line ends it, not the 1M steps
    assert os.path.getsize('w.tf') > 0 and os.path.getsize('h.parquet') > 0  # written on the way out, as on Ctrl-C


def test_a_search_piped_to_head_stops_leaving_no_running_trial(workdir, xagents_command):
    import optuna
    from optuna.storages.journal import JournalFileBackend

    status, err, _ = run_into_closed_pipe(xagents_command + [
        'tune', 'ppo', '--env', 'CartPole-v1', '--trial-steps', '500', '--n-reports', '1', '--n-trials', '20',
        '--lr', '1e-4', '1e-2'], lines=2)
    assert (status, err) == (141, '')
    storage = optuna.storages.JournalStorage(JournalFileBackend('ppo-CartPole-v1.journal.log'))
    states = [trial.state.name for trial in optuna.load_study(study_name='ppo-CartPole-v1', storage=storage).trials]
    assert 0 < len(states) < 20 and 'RUNNING' not in states, states


@pytest.mark.parametrize('signal_number', [signal.SIGTERM, signal.SIGINT], ids=['SIGTERM', 'Ctrl-C'])
def test_a_signal_while_ale_py_loads_is_one_line_and_status_130(xagents_command, signal_number):
    # Reading the env's tuned defaults loads ale-py (C++ that a KeyboardInterrupt inside its initialisation would
    # abort), before TensorFlow loads and the run's own handling begins.
    process = subprocess.Popen(xagents_command + ['train', 'ppo', '--env', 'PongNoFrameskip-v4', '--max-steps', '64'],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while '_ale_py' not in open(f'/proc/{process.pid}/maps').read():
            assert process.poll() is None and time.monotonic() < deadline, process.communicate()
            time.sleep(0.05)
        process.send_signal(signal_number)
        out, err = process.communicate(timeout=60)
    finally:
        process.kill()
    assert (process.returncode, err, out) == (130, 'xagents: interrupted\n', '')


def test_a_ctrl_c_that_keras_takes_for_a_missing_package_is_one_line_and_status_130(xagents_command, tmp_path):
    # A Ctrl-C inside optree's C++ initialisation surfaces as an ImportError that Keras replaces with "you need to
    # have `optree` installed", the interruption gone from the chain. This optree does the same on purpose.
    (tmp_path / 'optree').mkdir()
    (tmp_path / 'optree' / '__init__.py').write_text(
        'import signal\n'
        'try:\n'
        '    signal.raise_signal(signal.SIGINT)\n'
        'except KeyboardInterrupt:\n'
        '    raise ImportError("initialization failed") from None\n')
    environment = {**os.environ, 'PYTHONPATH': os.pathsep.join([str(tmp_path), os.environ.get('PYTHONPATH', '')])}
    result = subprocess.run(xagents_command + ['train', 'ppo', '--env', 'CartPole-v1', '--max-steps', '64'],
                            capture_output=True, text=True, env=environment, cwd=tmp_path, timeout=120)
    assert (result.returncode, result.stderr, result.stdout) == (130, 'xagents: interrupted\n', '')
