"""Playing back: on a screen (a real X server, Xvfb), as video and frames, never over earlier files."""
from __future__ import annotations

import os
import shutil
import subprocess
import time

import pytest

PLAY = ['play', 'ppo', '--env', 'CartPole-v1', '--weights', 'w.tf', '--seed', '0']


@pytest.fixture
def weights(workdir, xagents_command):
    trained = subprocess.run(xagents_command + ['train', 'ppo', '--env', 'CartPole-v1', '--max-steps', '2000',
                                                '--n-envs', '2', '--checkpoints', 'w.tf', '--quiet'],
                             capture_output=True, text=True)
    assert trained.returncode == 0, trained.stderr
    return 'w.tf'


@pytest.fixture
def display():
    """An X display served by Xvfb (installed by .ci/run; skipped elsewhere if missing)."""
    if shutil.which('Xvfb') is None:
        if os.environ.get('CI'):
            pytest.fail('Xvfb is not installed: .ci/run installs it (Debian package xvfb)')
        pytest.skip('Xvfb is not installed (Debian package xvfb)')
    number = 90 + os.getpid() % 100
    server = subprocess.Popen(['Xvfb', f':{number}', '-screen', '0', '800x600x24', '-nolisten', 'tcp'],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 20
    while not os.path.exists(f'/tmp/.X11-unix/X{number}') and time.time() < deadline:
        time.sleep(0.1)
    yield f':{number}'
    server.terminate()
    server.wait(timeout=10)


def play(xagents_command, *flags, **environment):
    env = {key: value for key, value in os.environ.items() if key not in ('DISPLAY', 'WAYLAND_DISPLAY')}
    return subprocess.run(xagents_command + PLAY + list(flags), capture_output=True, text=True, timeout=300,
                          env={**env, **environment})


def test_render_without_a_display_is_one_line_with_status_2(weights, xagents_command):
    result = play(xagents_command, '--render', '--max-steps', '20')
    assert result.returncode == 2, result.stderr
    assert result.stderr == ('xagents play ppo: error: --render needs a display and none is set (DISPLAY): '
                             'record the game with --video-dir or --frame-dir instead\n')


def test_render_on_a_display_shows_the_game(weights, xagents_command, display):
    result = play(xagents_command, '--render', '--max-steps', '50', DISPLAY=display)
    assert result.returncode == 0, (result.returncode, result.stderr[-2000:])  # 139: a segfault
    assert 0 < float(result.stdout.strip().splitlines()[-1].split(': ')[1]) <= 50


def test_recordings_never_replace_earlier_ones_and_print_no_display_noise(weights, xagents_command):
    steps = []
    for _ in range(2):
        result = play(xagents_command, '--video-dir', 'video', '--frame-dir', 'frames', '--max-steps', '30')
        assert result.returncode == 0, result.stderr
        assert 'XDG_RUNTIME_DIR' not in result.stdout + result.stderr
        steps.append(int(float(result.stdout.strip().splitlines()[-1].split(': ')[1])))  # CartPole: 1 a step
    assert sorted(os.listdir('video')) == ['CartPole-v1-2-episode-0.mp4', 'CartPole-v1-episode-0.mp4']
    frames = sorted(os.listdir('frames'))
    assert len(frames) == sum(steps) and frames[0] == 'CartPole-v1-000000.jpg'
    assert f'CartPole-v1-2-{steps[1] - 1:06d}.jpg' in frames


def test_a_frame_frequency_without_a_frame_dir_is_refused(weights, xagents_command):
    result = play(xagents_command, '--frame-frequency', '10', '--max-steps', '20')
    assert result.returncode == 2 and result.stderr == (
        'xagents play ppo: error: frame_frequency is for frames saved in a frame_dir: give one (--frame-dir)\n')


def test_plot_never_replaces_an_image(xagents_cli, workdir):
    import pandas as pd

    pd.DataFrame({'mean_reward': [1.0], 'best_reward': [1.0], 'episode_reward': [1.0], 'step': [8],
                  'time': [0.1]}).to_parquet('h.parquet')
    with open('curves.png', 'wb') as file:
        file.write(b'earlier')
    status, _, err = xagents_cli('plot', 'h.parquet', '--env', 'CartPole-v1', '--output', 'curves.png')
    assert status == 2 and err == 'xagents plot: error: curves.png exists: choose another --output\n'
    assert open('curves.png', 'rb').read() == b'earlier'
