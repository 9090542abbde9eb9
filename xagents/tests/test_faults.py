"""Faults: nothing lost, one clear line. Files from other runs, torn sets, kills, signals, failing writes."""
from __future__ import annotations

import contextlib
import logging
import os
import re
import resource
import shutil
import signal
import subprocess
import time

import gymnasium as gym
import numpy as np
import pandas as pd
import pytest

import xagents
from xagents import A2C, PPO, SAC
from xagents.storage.checkpoints import read_checkpoint
from xagents.storage.history import read_history
from xagents.training.play import play_episodes

QUICK = ['--env', 'CartPole-v1', '--max-steps', '3000', '--n-envs', '2', '--seed', '0', '--reward-buffer-size', '10']


def snapshot(*paths: str) -> dict[str, bytes]:
    return {path: open(path, 'rb').read() for path in paths}


@pytest.mark.parametrize('argv, message', [
    (['ppo', *QUICK, '--checkpoints', 'same', '--history-checkpoint', 'same'],
     'expected a path of its own for each output (checkpoints, history, tensorboard, save_dir), got same twice'),
    (['sac', '--env', 'Pendulum-v1', '--max-steps', '100', '--checkpoints', 'a.tf', 'a.tf', 'b.tf', 'c.tf'],
     'expected a path of its own for each output (checkpoints, history, tensorboard, save_dir), got a.tf twice'),
    (['ppo', *QUICK, '--checkpoints', 'notes.txt/w.tf'], 'cannot write notes.txt/w.tf: notes.txt is not a directory'),
    (['ppo', *QUICK, '--history-checkpoint', 'folder'], 'folder is a directory, expected a file name'),
    (['ppo', *QUICK, '--tensorboard', 'notes.txt'], 'notes.txt is not a directory'),
    (['ppo', *QUICK, '--save-dir', 'h.parquet', '--history-checkpoint', 'h.parquet'],
     'expected a path of its own for each output (checkpoints, history, tensorboard, save_dir), got h.parquet twice'),
    (['ppo', *QUICK, '--tensorboard', 'c.tf', '--checkpoints', 'c.tf'],
     'expected a path of its own for each output (checkpoints, history, tensorboard, save_dir), got c.tf twice'),
    # A refusal after a folder to create was checked leaves that folder uncreated.
    (['ppo', *QUICK, '--tensorboard', 'new/tb', '--save-dir', 'new/saves', '--history-checkpoint', 'folder'],
     'folder is a directory, expected a file name'),
])
def test_outputs_that_cannot_be_written_are_refused_before_training(xagents_cli, workdir, argv, message):
    os.mkdir('folder')
    with open('notes.txt', 'w') as file:
        file.write('precious')
    status, out, err = xagents_cli('train', *argv)
    assert status == 2 and err == f'xagents train {argv[0]}: error: {message}\n'
    assert 'steps' not in out  # no progress line: refused before training
    assert sorted(os.listdir('.')) == ['folder', 'notes.txt'] and os.listdir('folder') == []
    assert open('notes.txt').read() == 'precious'


def test_another_agents_or_envs_files_are_refused_in_one_line(xagents_cli, workdir):
    assert xagents_cli('train', 'a2c', *QUICK, '--checkpoints', 'a2c.tf', '--history-checkpoint', 'a2c.parquet')[0] == 0
    assert xagents_cli('train', 'ppo', *QUICK, '--checkpoints', 'ppo.tf')[0] == 0
    files = snapshot('a2c.tf', 'a2c.parquet', 'ppo.tf')
    # A2C and PPO models have equal shapes: only the recorded identity tells them apart.
    status, _, err = xagents_cli('train', 'ppo', *QUICK, '--weights', 'a2c.tf', '--checkpoints', 'a2c.tf')
    assert status == 2 and err == 'xagents train ppo: error: a2c.tf comes from a run with agent A2C, this one has PPO\n'
    status, _, err = xagents_cli('play', 'a2c', '--env', 'CartPole-v1', '--weights', 'ppo.tf')
    assert status == 2 and err == 'xagents play a2c: error: ppo.tf comes from a run with agent PPO, this one has A2C\n'
    status, _, err = xagents_cli('play', 'dqn', '--env', 'CartPole-v1', '--weights', 'ppo.tf')  # DQN has 2 models
    assert status == 2 and err == 'xagents play dqn: error: ppo.tf comes from a run with agent PPO, this one has DQN\n'
    status, _, err = xagents_cli('train', 'ppo', *QUICK, '--weights', 'ppo.tf', '--history-checkpoint', 'a2c.parquet')
    assert status == 2 and err.endswith('a2c.parquet comes from a run with agent A2C, this one has PPO\n')
    status, _, err = xagents_cli('train', 'a2c', '--env', 'Acrobot-v1', '--max-steps', '100', '--weights', 'a2c.tf',
                                 '--history-checkpoint', 'a2c.parquet')
    assert status == 2 and err.endswith('a2c.tf comes from a run with env CartPole-v1, this one has Acrobot-v1\n')
    status, _, err = xagents_cli('train', 'a2c', '--env', 'Acrobot-v1', '--max-steps', '100',
                                 '--history-checkpoint', 'a2c.parquet')
    assert status == 2 and err.endswith('a2c.parquet comes from a run with env CartPole-v1, this one has Acrobot-v1\n')
    assert snapshot(*files) == files


def test_a_torn_set_of_checkpoints_is_refused(workdir):
    """SAC saves four files in turn: a kill between two leaves files of different steps."""
    paths = ['actor.tf', 'critic.tf', 'target.tf', 'alpha.tf']
    agent = SAC.from_env('Pendulum-v1', seed=0, checkpoints=paths, quiet=True, buffer_initial_size=256,
                         buffer_batch_size=64)
    agent.fit(max_steps=400)
    agent.save_models()
    first = snapshot(*paths)
    agent.fit(max_steps=400)  # 400 more: step 800
    agent.save_models()
    with open('critic.tf', 'wb') as file:  # as if killed after writing the actor of step 800
        file.write(first['critic.tf'])
    fresh = SAC.from_env('Pendulum-v1', seed=0, quiet=True)
    with pytest.raises(ValueError, match=r'expected weights files saved together, got actor.tf at step 800, '
                                         r'critic.tf at step 400, target.tf at step 800, alpha.tf at step 800'):
        fresh.load_weights(paths)


def test_a_kill_right_after_the_first_history_write_leaves_weights_to_resume_from(workdir, xagents_command):
    command = xagents_command + ['train', 'ppo', '--env', 'CartPole-v1', '--max-steps', '10000000', '--seed', '0',
                                 '--checkpoints', 'w.tf', '--history-checkpoint', 'h.parquet', '--log-frequency', '1',
                                 '--quiet']
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 120
        while not os.path.exists('h.parquet') and time.time() < deadline:
            time.sleep(0.005)
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    assert os.path.exists('w.tf')  # saved before the history, never after it
    resumed = subprocess.run(xagents_command + ['train', 'ppo', '--env', 'CartPole-v1', '--max-steps', '2000',
                                                '--checkpoints', 'w.tf', '--history-checkpoint', 'h.parquet',
                                                '--weights', 'w.tf', '--quiet'], capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr
    assert read_history('h.parquet')['step'].is_monotonic_increasing


def interruptible() -> None:
    """Give the command Ctrl-C as a terminal does: a test suite started in the background by a shell inherits
    SIGINT ignored, and so would the command (Python then leaves it ignored)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize('signal_number, envs', [(signal.SIGINT, []), (signal.SIGTERM, []),
                                                  (signal.SIGINT, ['--n-envs', '2', '--async-envs'])])
def test_a_signal_stops_training_in_order_with_one_line_and_status_130(workdir, xagents_command, signal_number, envs):
    """With --async-envs a terminal's Ctrl-C reaches the env workers too; here they get it first, and they ignore
    it: the learner stops the run and closes them."""
    command = xagents_command + ['train', 'ppo', '--env', 'CartPole-v1', '--max-steps', '10000000', '--seed', '0',
                                 '--reward-buffer-size', '10', '--checkpoints', 'w.tf', '--history-checkpoint',
                                 'h.parquet', *envs]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               preexec_fn=interruptible)
    deadline = time.time() + 120
    while not os.path.exists('h.parquet') and time.time() < deadline:
        time.sleep(0.05)
    time.sleep(1.0)
    if envs:
        with open(f'/proc/{process.pid}/task/{process.pid}/children') as file:
            workers = [int(pid) for pid in file.read().split()]
        assert len(workers) == 2
        for worker in workers:
            os.kill(worker, signal_number)
        time.sleep(0.5)
    process.send_signal(signal_number)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 130, err
    assert len(err.splitlines()) == 1, err
    (line,) = err.splitlines()
    assert line.startswith('xagents train ppo: interrupted at step ')
    assert line.endswith('; weights (w.tf) and history (h.parquet) saved')
    step = int(line.split('at step ')[1].split(';')[0])
    history = read_history('h.parquet')
    assert 0 < history['step'].iloc[-1] <= step and 'Traceback' not in out
    agent = PPO.from_env('CartPole-v1', quiet=True)
    agent.load_weights(['w.tf'])  # the weights of the best mean reward in the history
    assert agent.steps == 0 and np.isfinite(history['best_reward'].iloc[-1])


def test_async_envs_close_when_ctrl_c_came_after_their_step_was_read(capfd):
    """Ctrl-C between reading the workers' answers and marking the step done leaves Gymnasium waiting for answers
    that already came: closing must not hang on it, and the workers it stops print nothing (the command turns
    SIGTERM into a stop in order, which its workers must not inherit)."""
    import threading

    from xagents.envs.creation import close_envs, create_envs

    handler = signal.signal(signal.SIGTERM, signal.default_int_handler)  # as the command sets it
    try:
        envs = create_envs('CartPole-v1', n_envs=2, async_envs=True)
    finally:
        signal.signal(signal.SIGTERM, handler)
    envs.reset(seed=0)
    envs.step_async(envs.action_space.sample())
    for pipe in envs.parent_pipes:  # what step_wait had read when the interrupt came
        pipe.recv()
    closing = threading.Thread(target=close_envs, args=(envs,), daemon=True)
    closing.start()
    closing.join(timeout=60)
    assert not closing.is_alive()
    assert not any(process.is_alive() for process in envs.processes)
    assert 'Traceback' not in capfd.readouterr().err


def test_a_terminated_run_says_which_files_it_wrote_and_which_it_did_not(workdir, xagents_command):
    """SIGTERM before any episode finished (they never end here): no weights or history were written, and the
    line says so rather than 'weights and history saved'."""
    command = xagents_command + ['train', 'ppo', '--env', 'MountainCar-v0', '--env-kwargs', 'max_episode_steps=100000000',
                                 '--max-steps', '10000000', '--checkpoints', 'w.tf', '--history-checkpoint', 'h.parquet',
                                 '--tensorboard', 'tb']
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while not os.path.exists('tb') and time.time() < deadline:  # made once training has started
        time.sleep(0.05)
    time.sleep(0.5)
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 130 and len(err.splitlines()) == 1, err
    assert err.startswith('xagents train ppo: interrupted at step ') and err.endswith('; no weights or history written\n')
    assert not os.path.exists('w.tf') and not os.path.exists('h.parquet')


def test_a_sigterm_whose_interrupt_python_drops_inside_a_gc_hook_still_stops_the_run():
    """A signal handled while a garbage-collection hook runs (JAX's, which TensorFlow loads) raises its
    KeyboardInterrupt inside the hook, where Python prints and drops it: the run stops at the end of that round."""
    import gc

    from xagents.training.callbacks import Callback
    from xagents.utils.console import stop_in_order_on_signals

    agent, handlers = PPO.from_env('CartPole-v1', n_envs=2, seed=0), {}
    sent, dropped = [], []

    def hook(phase: str, info: dict) -> None:
        if sent and not dropped:
            dropped.append(phase)
            signal.raise_signal(signal.SIGTERM)
            dropped.append('after the signal')  # the handler's KeyboardInterrupt is raised by now, and dropped

    class CollectGarbage(Callback):
        def on_round(self, run) -> None:
            if run.agent.steps >= 2048 and not sent:
                sent.append(run.agent.steps)
                gc.collect()

    for number in (signal.SIGINT, signal.SIGTERM):
        handlers[number] = signal.getsignal(number)
    stop_in_order_on_signals()
    gc.callbacks.append(hook)
    try:
        with pytest.raises(KeyboardInterrupt):
            agent.fit(max_steps=10 ** 7, callbacks=[CollectGarbage()], quiet=True)
    finally:
        gc.callbacks.remove(hook)
        for number, handler in handlers.items():
            signal.signal(number, handler)
    assert dropped == ['start']  # the hook ran no further: the interrupt was raised in it
    assert sent[0] <= agent.steps <= sent[0] + 2 * 2048, (sent, agent.steps)


def test_a_sigterm_that_python_drops_before_a_run_stops_it_at_its_start(capsys):
    """A signal whose KeyboardInterrupt Python drops while a command starts up (a garbage-collection hook while
    Atari games are built) is not lost: the run stops before its first round, and nothing is printed for it."""
    import gc

    from xagents.utils.console import stop_in_order_on_signals

    handlers = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)}
    dropped = []

    def hook(phase: str, info: dict) -> None:
        if not dropped:
            dropped.append(phase)
            signal.raise_signal(signal.SIGTERM)
            dropped.append('after the signal')

    stop_in_order_on_signals()
    agent = PPO.from_env('CartPole-v1', n_envs=2, seed=0, quiet=True)
    gc.callbacks.append(hook)
    try:
        gc.collect()  # the hook's KeyboardInterrupt is dropped here: no exception reaches this test
    finally:
        gc.callbacks.remove(hook)
    try:
        with pytest.raises(KeyboardInterrupt):
            agent.fit(max_steps=2048)
    finally:
        for number, handler in handlers.items():
            signal.signal(number, handler)
    assert dropped == ['start'] and agent.steps == 0
    assert 'KeyboardInterrupt' not in capsys.readouterr().err


def test_a_ctrl_c_handled_before_a_run_does_not_stop_the_run():
    """A Ctrl-C that was raised and handled before fit (a command's start-up, or code of the user's) is not the
    run's: the run trains its steps."""
    from xagents.utils.console import stop_in_order_on_signals

    handlers = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)}
    stop_in_order_on_signals()
    try:
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)
        agent = PPO.from_env('CartPole-v1', n_envs=2, seed=0, quiet=True)
        try:
            agent.fit(max_steps=2048)
        except KeyboardInterrupt:
            pytest.fail(f'the run stopped at step {agent.steps} for a Ctrl-C handled before it')
    finally:
        for number, handler in handlers.items():
            signal.signal(number, handler)
    assert agent.steps >= 2048


@pytest.mark.parametrize('after', [0.5, 1.0, 1.5])
def test_ctrl_c_while_starting_up_is_one_line(workdir, xagents_command, after):
    process = subprocess.Popen(xagents_command + ['train', 'ppo', *QUICK], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, preexec_fn=interruptible)
    time.sleep(after)  # loading TensorFlow
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 130 and len(err.splitlines()) == 1 and err.endswith('interrupted\n'), err


def test_a_ctrl_c_inside_an_extensions_initialisation_counts_as_an_interruption():
    """Ctrl-C while TensorFlow's C++ extensions initialise reaches Python as their ImportError, caused by the
    KeyboardInterrupt: the command line says 'interrupted' (status 130), not the ImportError's traceback."""
    from xagents.utils.console import interrupted

    try:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as interrupt:
            raise ImportError('initialization failed') from interrupt
    except ImportError as error:
        assert interrupted(error)
    assert not interrupted(ImportError('initialization failed'))
    try:
        try:
            raise ValueError('a real problem')
        except ValueError:
            raise ImportError('no module named x')  # (context, not an interruption)
    except ImportError as error:
        assert not interrupted(error)


def test_a_write_that_fails_during_training_ends_with_one_line_status_1_and_keeps_the_files(workdir,
                                                                                           xagents_command):
    files = ['--checkpoints', 'w.tf', '--history-checkpoint', 'h.parquet']
    first = subprocess.run(xagents_command + ['train', 'ppo', *QUICK, *files], capture_output=True, text=True)
    assert first.returncode == 0, first.stderr
    before, before_history = snapshot('w.tf'), 'before.parquet'
    with open(before_history, 'wb') as file:
        file.write(open('h.parquet', 'rb').read())

    def small_files():  # files over 64 KiB (the weights) cannot be written (EFBIG), as on a full disk
        resource.setrlimit(resource.RLIMIT_FSIZE, (65536, 65536))

    resumed = subprocess.run(xagents_command + ['train', 'ppo', '--env', 'CartPole-v1', '--max-steps', '20000',
                                                '--n-envs', '2', '--weights', 'w.tf', *files],
                             capture_output=True, text=True, preexec_fn=small_files)
    assert resumed.returncode == 1, resumed.stderr
    (line,) = resumed.stderr.splitlines()
    assert line == 'xagents train ppo: error: could not write w.tf: File too large; the files written before are kept'
    assert snapshot('w.tf') == {'w.tf': before['w.tf']}  # the failed write left the previous weights whole
    pd.testing.assert_frame_equal(read_history('h.parquet').iloc[:len(read_history(before_history))],
                                  read_history(before_history))
    assert sorted(os.listdir('.')) == ['before.parquet', 'h.parquet', 'w.tf']  # no temporary file left


def test_temporary_files_left_by_a_kill_are_removed_by_the_next_run(workdir):
    for name in ('.h.parquet.ab12cd34', '.w.tf.9z8y7x6w', '.other.txt.abcdefgh'):
        open(name, 'w').close()
    PPO.from_env('CartPole-v1', n_envs=2, checkpoints=['w.tf'], history_checkpoint='h.parquet', quiet=True).fit(
        max_steps=500)
    assert sorted(os.listdir('.')) == ['.other.txt.abcdefgh', 'h.parquet', 'w.tf']
    assert len(pd.read_parquet('h.parquet')) > 0


def test_a_python_agent_refuses_another_agents_history(workdir):
    PPO.from_env('CartPole-v1', n_envs=2, quiet=True).fit(max_steps=500, history_checkpoint='h.parquet')
    with pytest.raises(ValueError, match='h.parquet comes from a run with agent PPO, this one has A2C'):
        A2C.from_env('CartPole-v1', quiet=True).fit(max_steps=500, history_checkpoint='h.parquet')


def test_a_run_with_every_output_resumes_from_its_latest_save(xagents_cli, workdir):
    """--checkpoints, --history-checkpoint and --save-dir together: the one way on is --weights SAVE_DIR/step-N with the
    same outputs (the save holds the optimizer, counters and random state; the best weights go on being kept)."""
    outputs = ['--checkpoints', 'w.tf', '--history-checkpoint', 'h.parquet', '--save-dir', 'sd', '--save-frequency', '1000']
    assert xagents_cli('train', 'ppo', *QUICK, *outputs)[0] == 0
    best = snapshot('w.tf')
    status, _, err = xagents_cli('train', 'ppo', *QUICK, '--weights', 'w.tf', *outputs)  # its best weights, older
    assert status == 2 and re.search(r'the weights loaded \(w.tf\) are at step [\d,]+, before sd/step-(\d+), the newest '
                                     r'save of save_dir sd, .*: resume from that save \(--weights sd/step-\1\)', err), err
    status, _, err = xagents_cli('train', 'ppo', *QUICK, *outputs)
    assert status == 2 and 'history h.parquet exists: resume its run from a save of sd (--weights sd/step-...)' in err
    latest = sorted(name for name in os.listdir('sd') if name.startswith('step-'))[-1]
    status, out, err = xagents_cli('train', 'ppo', *QUICK[:2], '--max-steps', '6000', '--total', '--n-envs', '2',
                                   '--reward-buffer-size', '10', '--weights', f'sd/{latest}', *outputs)
    assert status == 0, err
    history = read_history('h.parquet')
    assert history['step'].iloc[-1] > 3000 and read_checkpoint('w.tf').steps > 0  # went on, with its best weights
    assert snapshot('w.tf') == best or history['best_reward'].iloc[-1] > history['best_reward'][history['step'] <= 3000].max()


def test_a_run_resumed_from_a_save_before_its_end_goes_on_from_the_saves_step(workdir, caplog):
    """A history that runs past the save a run resumes from (an earlier save, as the latest is after a kill between
    two saves): the run goes on from the save's step (the clock of its schedules and its next saves), and the episodes
    after it, played by weights the save does not hold, leave the history."""
    agent = PPO.from_env('CartPole-v1', seed=0, n_envs=2, n_steps=64, quiet=True)
    agent.fit(max_steps=1536, save_dir='saves', save_frequency=1024, history_checkpoint='h.parquet')
    played = read_history('h.parquet')
    assert played['step'].iloc[-1] > 1024
    assert sorted(os.listdir('saves')) == ['step-000000001024', 'step-000000001536']  # periodic, final
    resumed = PPO.load('saves/step-000000001024', quiet=True)
    assert resumed.steps == 1024
    with caplog.at_level(logging.INFO, logger='xagents'):
        resumed.fit(max_steps=2048, total=True, save_dir='saves', save_frequency=512, history_checkpoint='h.parquet')
    history = read_history('h.parquet')
    kept = played[played['step'] <= 1024]
    assert (f'Resuming at step 1024 of the save: the {len(played) - len(kept)} episodes the history holds after it '
            'are left out') in caplog.messages
    pd.testing.assert_frame_equal(history.iloc[:len(kept)], kept)
    assert history['step'].iloc[len(kept):].min() > 1024 and history['step'].is_monotonic_increasing
    assert sorted(os.listdir('saves')) == ['step-000000001024', 'step-000000001536', 'step-000000002048']
    assert resumed.steps == 2048


def test_a_ctrl_c_while_a_step_is_sent_to_async_workers_still_closes_them_in_order(capfd):
    """Ctrl-C that lands after the first worker got its step and before the second did waits until both have it:
    the step is then awaited, its answers read, and every worker closes cleanly (else the first worker's answer would
    be read as its "closed", and the worker's own "closed" could find the pipe shut: a traceback)."""
    from xagents.envs.creation import close_envs, create_envs

    envs = create_envs('CartPole-v1', n_envs=2, async_envs=True, seed=0)
    envs.reset(seed=0)
    first = envs.parent_pipes[0]
    send = first.send

    def send_then_ctrl_c(message):
        send(message)
        if message[0] == 'step':
            signal.raise_signal(signal.SIGINT)

    first.send = send_then_ctrl_c
    with pytest.raises(KeyboardInterrupt):
        envs.step(np.zeros(2, np.int64))
    observations, *_ = envs.step_wait(timeout=30)  # the step went to both workers, and both answered it
    assert observations.shape == (2, 4)
    close_envs(envs)
    assert [process.exitcode for process in envs.processes] == [0, 0]
    assert 'Traceback' not in capfd.readouterr().err


class NeverEnds(gym.Env):
    """An env whose episodes never end: it neither terminates nor truncates, and registers no limit."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        return np.zeros(2, np.float32), 1.0, False, False, {}


@pytest.fixture
def never_ends():
    gym.register('NeverEndsForTest-v0', entry_point=NeverEnds)
    try:
        yield 'NeverEndsForTest-v0'
    finally:
        gym.registry.pop('NeverEndsForTest-v0')


@contextlib.contextmanager
def within(seconds: int):
    """Fail, instead of hanging, if the block runs longer than ``seconds``."""
    def expired(*_):
        raise TimeoutError(f'still running after {seconds} s: an episode that never ends was never cut')

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def test_an_episode_that_never_ends_is_cut_at_the_envs_own_limit_everywhere_it_is_played(never_ends, caplog):
    """A limit given as an env kwarg is the env's own: evaluation (the agent's, Python's, fit's periodic one) and
    play end the episodes there, instead of at 100,000 steps."""
    agent = PPO.from_env(never_ends, env_kwargs={'max_episode_steps': 40}, n_steps=16, seed=0, quiet=True)
    with within(60):
        assert agent.evaluate(episodes=2).lengths.tolist() == [40, 40]
        assert xagents.evaluate(agent, episodes=3).lengths.tolist() == [40, 40, 40]
        agent.fit(max_steps=64, eval_frequency=32, eval_episodes=2)
        assert [length for _, length in play_episodes(agent, episodes=2)] == [40, 40]
    assert 'cut' not in caplog.text  # the env ended them itself


def test_playing_an_env_without_a_limit_stops_at_100000_steps_and_says_so(never_ends, xagents_cli, workdir, caplog):
    status, _, err = xagents_cli('train', 'ppo', '--env', never_ends, '--n-steps', '16', '--max-steps', '16',
                                 '--save-dir', 'sd', '--quiet')
    assert status == 0, err
    with within(300):
        status, out, err = xagents_cli('play', 'ppo', '--env', never_ends, '--weights', 'sd')
    assert status == 0, err
    assert 'Play cut game 1 at 100,000 steps: the env sets no limit of its own (pass max_steps, --max-steps, to ' \
           'change it)' in out
    agent = PPO.from_env(never_ends, n_steps=16, quiet=True)
    with within(300):
        assert play_episodes(agent, max_steps=30, episodes=2) == [(30.0, 30), (30.0, 30)]  # a cap given: no word
        assert play_episodes(agent) == [(100_000.0, 100_000)]


def test_a_runs_final_weights_resume_into_its_own_save_dir_whose_newest_save_is_older(workdir, xagents_cli):
    """The final weights (--checkpoints, step 1,280) go on from the run's newest save (step 1,024, its final save
    lost): the same run, resumed at the weights' step; weights older than the newest save are refused, saying why."""
    run = ['train', 'ppo', '--env', 'CartPole-v1', '--n-steps', '32', '--n-envs', '8', '--seed', '0', '--checkpoints',
           'w.tf', '--history-checkpoint', 'h.parquet', '--save-dir', 'sd', '--save-frequency', '1024', '--quiet']
    assert xagents_cli(*run, '--max-steps', '1280')[0] == 0
    shutil.rmtree('sd/step-000000001280')
    old = snapshot('w.tf')
    assert read_checkpoint('w.tf').steps == 1280 and os.listdir('sd') == ['step-000000001024']
    status, _, err = xagents_cli(*run, '--max-steps', '512', '--weights', 'w.tf')
    assert status == 0, err
    first, final = sorted(os.listdir('sd'))
    assert first == 'step-000000001024' and int(final[5:]) > 1280  # resumed at the weights' step
    assert read_history('h.parquet')['step'].is_monotonic_increasing
    with open('old.tf', 'wb') as file:
        file.write(old['w.tf'])
    before = snapshot('w.tf', 'h.parquet')
    status, _, err = xagents_cli(*[{'w.tf': 'w2.tf'}.get(arg, arg) for arg in run], '--max-steps', '512', '--weights',
                                 'old.tf')
    assert status == 2 and err == (
        f'xagents train ppo: error: the weights loaded (old.tf) are at step 1,280, before sd/{final}, the newest save '
        f'of save_dir sd, which would then hold saves out of order: resume from that save (--weights sd/{final}), or '
        'choose another directory\n'), err
    assert snapshot('w.tf', 'h.parquet') == before
