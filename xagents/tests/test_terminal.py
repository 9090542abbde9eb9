"""Training in a real terminal: a pseudo-terminal, where the progress bar is drawn (pipes never see it)."""
from __future__ import annotations

import fcntl
import os
import pty
import select
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
