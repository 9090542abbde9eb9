"""Files that matter survive: atomic writes, SIGKILL during training, metric sinks that really write."""
import glob
import os
import signal
import subprocess
import time

import pytest
import tensorflow as tf

from xagents import PPO
from xagents.storage.atomic import atomic_write
from xagents.storage.history import read_history


def test_failed_write_leaves_previous_file(workdir):
    with atomic_write('f.bin') as file:
        file.write(b'good')
    with pytest.raises(RuntimeError):
        with atomic_write('f.bin') as file:
            file.write(b'half')
            raise RuntimeError('killed')
    assert open('f.bin', 'rb').read() == b'good'
    assert os.listdir('.') == ['f.bin']  # no temporary left behind


def test_sigkill_during_training_leaves_weights_and_history_readable(workdir, xagents_command):
    command = xagents_command + ['train', 'ppo', '--env', 'CartPole-v1', '--max-steps',
               '10000000', '--checkpoints', 'w.tf', '--history-checkpoint', 'h.parquet', '--log-frequency', '1',
               '--seed', '0', '--quiet']
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 120
        while not (os.path.exists('w.tf') and os.path.exists('h.parquet')) and time.time() < deadline:
            time.sleep(0.1)
        time.sleep(1.5)  # well into the stream of rewrites (one per episode and per improvement)
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    history = read_history('h.parquet')
    assert len(history) > 0 and history['step'].is_monotonic_increasing
    agent = PPO.from_env('CartPole-v1', quiet=True)
    agent.load_weights(['w.tf'])  # raises if the file is truncated or not a checkpoint
    assert int(agent.optimizer.iterations) > 0


def test_tensorboard_and_wandb_offline_sinks_record_metrics(workdir, monkeypatch):
    monkeypatch.setenv('WANDB_MODE', 'offline')
    monkeypatch.setenv('WANDB_DIR', str(workdir))
    agent = PPO.from_env('CartPole-v1', seed=0, log_frequency=5, quiet=True)
    agent.fit(max_steps=3000, monitor_session='test-run', tensorboard='tb')
    (events,) = glob.glob('tb/events.out.tfevents.*')
    tags = {value.tag for event in tf.compat.v1.train.summary_iterator(events) for value in event.summary.value}
    assert {'mean_reward', 'best_reward', 'policy_loss', 'value_loss', 'entropy'} <= tags
    runs = glob.glob('wandb/offline-run-*/run-*.wandb')
    assert len(runs) == 1 and os.path.getsize(runs[0]) > 0


def chattr(flag: str, path: str) -> None:
    """Set or clear an attribute (``+i`` immutable, ``+a`` append-only), or skip where the filesystem or user can't."""
    result = subprocess.run(['chattr', flag, path], capture_output=True)
    if result.returncode:
        pytest.skip(f'chattr {flag} needs root and a filesystem with attributes (ext4): {result.stderr.decode()}')


@pytest.fixture
def full_disk(tmp_path):
    """A 64 KiB tmpfs filled to its last byte (root only): the disk of a run that starts on a full disk."""
    folder = tmp_path / 'full'
    folder.mkdir()
    if subprocess.run(['mount', '-t', 'tmpfs', '-o', 'size=64k', 'tmpfs', str(folder)], capture_output=True).returncode:
        pytest.skip('mounting a small tmpfs needs root')
    try:
        filler = os.open(folder / 'filler', os.O_WRONLY | os.O_CREAT)
        with pytest.raises(OSError, match='No space left'):
            while True:
                os.write(filler, b'\0' * 4096)
        os.close(filler)
        yield folder
    finally:
        subprocess.run(['umount', '-l', str(folder)], check=True)


def test_a_write_refused_over_an_immutable_file_names_the_file_not_its_temporary(workdir):
    with atomic_write('h.parquet') as file:
        file.write(b'good')
    for flag in ('+i', '+a'):
        chattr(flag, 'h.parquet')
        try:
            with pytest.raises(OSError) as error:
                with atomic_write('h.parquet') as file:
                    file.write(b'new')
        finally:
            chattr(flag.replace('+', '-'), 'h.parquet')
        assert error.value.filename == 'h.parquet' and '.h.parquet.' not in str(error.value), error.value
        assert open('h.parquet', 'rb').read() == b'good' and os.listdir('.') == ['h.parquet']


@pytest.mark.parametrize('output', ['--checkpoints', '--history-checkpoint'])
def test_resuming_into_an_immutable_output_is_refused_before_training_naming_it(workdir, xagents_cli, output):
    args = ['train', 'ppo', '--env', 'CartPole-v1', '--n-steps', '16', '--max-steps', '256', '--checkpoints', 'w.tf',
            '--history-checkpoint', 'h.parquet', '--quiet']
    assert xagents_cli(*args)[0] == 0
    name = 'w.tf' if output == '--checkpoints' else 'h.parquet'
    before = {path: open(path, 'rb').read() for path in ('w.tf', 'h.parquet')}
    for flag in ('+i', '+a'):
        chattr(flag, name)
        try:
            status, _, err = xagents_cli(*args, '--weights', 'w.tf', '--max-steps', '512')
        finally:
            chattr(flag.replace('+', '-'), name)
        assert status == 2 and err == (f'xagents train ppo: error: cannot write {name}: Operation not permitted (an '
                                       f'immutable or append-only file: chattr -i -a {name}, or choose another '
                                       'path)\n'), err
        assert {path: open(path, 'rb').read() for path in before} == before
        assert sorted(os.listdir('.')) == ['h.parquet', 'w.tf']


@pytest.mark.parametrize('output', ['--checkpoints', '--history-checkpoint', '--save-dir', '--tensorboard', None])
def test_a_run_that_starts_on_a_full_disk_names_the_path_it_cannot_write(workdir, xagents_cli, full_disk,
                                                                          monkeypatch, output):
    monkeypatch.chdir(full_disk)
    path = {'--checkpoints': 'w.tf', '--history-checkpoint': 'h.parquet', '--save-dir': 'sd',
            '--tensorboard': 'tb', None: 'runs/ppo/CartPole-v1_1/history.parquet'}[output]
    status, _, err = xagents_cli('train', 'ppo', '--env', 'CartPole-v1', '--max-steps', '256',
                                 *([output, path] if output else []))
    assert status == 2 and err == f'xagents train ppo: error: cannot write {path}: No space left on device\n', err
    assert os.listdir('.') == ['filler']
