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
