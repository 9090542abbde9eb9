"""Concurrent runs: an output a live run writes is refused to any other run, and a killed run frees it."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from typing import Callable

import pytest

from xagents import PPO
from xagents.storage.history import read_history
from xagents.storage.locks import lock_outputs

LONG = ['train', 'ppo', '--env', 'CartPole-v1', '--max-steps', '10000000', '--seed', '0', '--quiet']


def in_use(label: str, pid: int) -> str:
    """The refusal of an output another live run (process ``pid``) holds."""
    return f'{label} is in use by another run (pid {pid}): wait until it ends, or choose another path'


def wait_for(condition: Callable[[], object], seconds: float = 120) -> None:
    deadline = time.time() + seconds
    while not condition():
        assert time.time() < deadline, 'timed out'
        time.sleep(0.05)


def files_under(folder: str) -> dict[str, bytes]:
    return {os.path.join(root, name): open(os.path.join(root, name), 'rb').read()
            for root, _, names in os.walk(folder) for name in names}


def lock_files() -> list[str]:
    return [path for path in files_under('.') if path.endswith('.lock')]


def saves() -> list[str]:
    """The whole periodic saves in sd (a save's manifest comes last)."""
    return [name for name in os.listdir('sd') if os.path.exists(f'sd/{name}/agent.json')] if os.path.isdir('sd') else []


def test_of_two_runs_started_together_on_one_save_dir_one_is_refused_and_a_killed_run_frees_it(workdir,
                                                                                               xagents_command):
    command = xagents_command + LONG + ['--save-dir', 'sd', '--save-frequency', '1000', '--save-keep', '2']
    runs = [subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)]
    time.sleep(0.5)
    runs.append(subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
    try:
        wait_for(lambda: any(run.poll() is not None for run in runs))
        refused, live = runs if runs[0].poll() is not None else runs[::-1]
        assert refused.returncode == 2
        assert refused.stderr.read() == f"xagents train ppo: error: {in_use('save_dir sd', live.pid)}\n"
        wait_for(saves)
        assert live.poll() is None
    finally:
        for run in runs:
            run.kill()
            run.wait()
    latest = max(saves())
    resumed = subprocess.run(xagents_command + ['train', 'ppo', '--env', 'CartPole-v1', '--max-steps', '1000',
                                                '--quiet', '--weights', f'sd/{latest}', '--save-dir', 'sd'],
                             capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr
    assert lock_files() == []


def test_a_run_on_the_checkpoints_and_history_of_a_live_run_is_refused_and_a_killed_run_frees_them(workdir,
                                                                                                  xagents_command):
    outputs = ['--checkpoints', 'w.tf', '--history-checkpoint', 'h.parquet']
    first = subprocess.Popen(xagents_command + LONG + outputs + ['--log-frequency', '1'], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: os.path.exists('h.parquet') and os.path.exists('w.tf'))
        first.send_signal(signal.SIGSTOP)  # its files stay as they are while the second run tries
        before = files_under('.')
        # Even resuming from them, which the files alone allow, is refused while the first run lives.
        second = subprocess.run(xagents_command + ['train', 'ppo', '--env', 'CartPole-v1', '--max-steps', '2000',
                                                   '--weights', 'w.tf', *outputs], capture_output=True, text=True)
        assert second.returncode == 2
        assert second.stderr == f"xagents train ppo: error: {in_use('history h.parquet', first.pid)}\n"
        assert files_under('.') == before
        first.send_signal(signal.SIGCONT)
        time.sleep(0.5)
        assert first.poll() is None
    finally:
        first.kill()
        first.wait()
    steps = read_history('h.parquet')['step'].iloc[-1]
    resumed = subprocess.run(xagents_command + ['train', 'ppo', '--env', 'CartPole-v1', '--max-steps', '1000',
                                                '--quiet', '--weights', 'w.tf', *outputs],
                             capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr
    assert read_history('h.parquet')['step'].iloc[-1] > steps
    assert lock_files() == []


def hold(*outputs: str, fork: bool = False) -> tuple[subprocess.Popen, int]:
    """Start another process that locks ``outputs`` as a run does (and with ``fork`` starts a child that
    outlives it), then sleeps; return it, once it holds them, and its child's pid (or 0)."""
    # (The child says its pid itself: by then it has let go of its copies of the locks, as a forked child does.)
    script = ('import os, sys, time; from xagents.storage.locks import lock_outputs\n'
              'locks = lock_outputs([("history", path) for path in sys.argv[2:]])\n'
              'child = os.fork() if sys.argv[1] == "fork" else 0\n'
              'if child == 0 and sys.argv[1] == "fork": print(os.getpid(), flush=True); time.sleep(600); os._exit(0)\n'
              'if sys.argv[1] != "fork": print(0, flush=True)\n'
              'time.sleep(600)\n')
    holder = subprocess.Popen([sys.executable, '-c', script, 'fork' if fork else '-', *outputs],
                              stdout=subprocess.PIPE, text=True)
    return holder, int(holder.stdout.readline())


def test_fit_refuses_an_output_another_process_holds_until_that_process_is_killed(workdir):
    holder, _ = hold('runs/h.parquet')
    agent = PPO.from_env('CartPole-v1', n_envs=2, checkpoints=['models/w.tf'], history_checkpoint='runs/h.parquet',
                         reward_buffer_size=5, quiet=True)
    try:
        with pytest.raises(ValueError, match=re.escape(in_use('history runs/h.parquet', holder.pid))):
            agent.fit(max_steps=500)
        # models/w.tf was locked first, then let go: neither its folder nor its lock file is left
        assert os.listdir('.') == ['runs'] and os.listdir('runs') == ['.h.parquet.lock']
    finally:
        holder.kill()  # SIGKILL: the process cannot let go of anything itself
        holder.wait()
    agent.fit(max_steps=500)
    assert sorted(files_under('.')) == ['./models/w.tf', './runs/h.parquet']  # the stale lock file went too


def test_a_child_that_outlives_a_killed_run_leaves_its_outputs_free(workdir):
    """Forked processes (async env workers) share their parent's open files, locks included."""
    holder, child = hold('h.parquet', fork=True)
    try:
        with pytest.raises(ValueError, match=re.escape(in_use('history h.parquet', holder.pid))):
            lock_outputs([('history', 'h.parquet')])
        holder.kill()
        holder.wait()
        os.kill(child, 0)  # still alive
        lock_outputs([('history', 'h.parquet')]).release()
    finally:
        os.kill(child, signal.SIGKILL)
