"""Damaged files: a changed byte, a truncation or an edit in any file xagents reads back is one line naming
the file and what is wrong (a ValueError; exit status 2 on the command line), never a traceback or a
silently different agent. And what a kill in the middle of a save leaves, the next run removes."""
from __future__ import annotations

import glob
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import zipfile

import pyarrow.parquet as pq
import pytest

from xagents.version import __version__

from xagents import DQN, PPO
from xagents.training.callbacks import Saves
from xagents.storage.history import read_history

SMALL = ['--env', 'CartPole-v1', '--n-envs', '2', '--n-steps', '64', '--seed', '0', '--quiet']


@pytest.fixture(scope='module')
def saved(tmp_path_factory):
    """Files as xagents writes them: PPO weights (--checkpoints) with a history, a PPO save and a DQN save
    with its replay buffer."""
    directory = tmp_path_factory.mktemp('saved')
    ppo = PPO.from_env('CartPole-v1', seed=0, n_envs=2, n_steps=64, quiet=True, checkpoints=[str(directory / 'w.tf')],
                       history_checkpoint=str(directory / 'h.parquet'))
    ppo.fit(max_steps=2048)
    ppo.save_models()
    ppo.save(str(directory / 'ppo'))
    dqn = DQN.from_env('CartPole-v1', seed=0, quiet=True, buffer_initial_size=1000)
    dqn.fit(max_steps=300)  # before buffer_initial_size: it only fills the buffer
    dqn.save(str(directory / 'dqn'), include_buffer=True)
    return directory


def damages(path: str) -> dict[str, bytes]:
    """The ``.npz`` archive ``path`` with one change each, named by where it lands in the zip format."""
    raw = open(path, 'rb').read()
    with zipfile.ZipFile(path) as archive:
        members, directory = archive.infolist(), archive.start_dir
    largest = max(members, key=lambda member: member.file_size)
    name_length, extra_length = struct.unpack('<HH', raw[largest.header_offset + 26:largest.header_offset + 30])
    data = largest.header_offset + 30 + name_length + extra_length  # after its local header
    header = raw[data:data + 128]  # the .npy header: magic, then a dict literal of dtype and shape
    next_to_last = directory + sum(46 + len(member.filename) for member in members[:-2])

    def flipped(offset: int, bits: int = 0xff, value: int | None = None) -> bytes:
        changed = bytearray(raw)
        changed[offset] = changed[offset] ^ bits if value is None else value
        return bytes(changed)

    return {
        'a byte of array data': flipped(data + largest.file_size // 2),
        'a bit of a dtype (<f4 to <f5)': flipped(data + header.index(b'<f4') + 2, 0x01),
        'a bit of a shape': flipped(data + header.index(b"'shape': (") + 10, 0x01),
        'a compression method': flipped(directory + 10),  # in the central directory
        'an extra field length': flipped(directory + 30, 0x40),
        # The comment of the next-to-last entry made long enough to swallow the last: zipfile then lists one
        # member fewer, without a complaint.
        'a comment length': flipped(next_to_last + 32, value=46 + len(members[-1].filename)),
        'the end of central directory record': flipped(len(raw) - 10),
        'truncated to half': raw[:len(raw) // 2],
        'truncated by one byte': raw[:-1],
    }


DAMAGES = [
    'a byte of array data', 'a bit of a dtype (<f4 to <f5)', 'a bit of a shape', 'a compression method',
    'an extra field length', 'a comment length', 'the end of central directory record', 'truncated to half',
    'truncated by one byte']


def manifest_of(directory: str) -> dict:
    with open(os.path.join(directory, 'agent.json')) as file:
        return json.load(file)


def one_line(err: str) -> str:
    assert err.count('\n') == 1 and 'Traceback' not in err, err
    return err.rstrip('\n')


@pytest.mark.parametrize('damage', DAMAGES)
def test_a_damaged_weights_file_is_one_line(saved, workdir, xagents_cli, damage):
    with open('w.tf', 'wb') as file:
        file.write(damages(str(saved / 'w.tf'))[damage])
    status, _, err = xagents_cli('play', 'ppo', '--env', 'CartPole-v1', '--weights', 'w.tf')
    line = one_line(err)
    assert status == 2 and line.startswith('xagents play ppo: error: w.tf is damaged: '), line
    assert line.endswith('; use a copy of it, or train anew')
    with pytest.raises(ValueError, match='w.tf is damaged: '):
        PPO.from_env('CartPole-v1', quiet=True).load_weights(['w.tf'])


@pytest.mark.parametrize('damage', DAMAGES)
def test_a_damaged_replay_buffer_is_one_line(saved, workdir, xagents_cli, damage):
    shutil.copytree(saved / 'dqn', 'dqn')
    buffer = os.path.join('dqn', manifest_of('dqn')['files']['buffer'])
    changed = damages(buffer)[damage]
    with open(buffer, 'wb') as file:
        file.write(changed)
    status, _, err = xagents_cli('train', 'dqn', '--env', 'CartPole-v1', '--weights', 'dqn', '--max-steps', '10')
    line = one_line(err)
    assert status == 2 and line.startswith(f'xagents train dqn: error: {buffer} ') and 'damaged' in line, line
    with pytest.raises(ValueError, match=f'{buffer} .*damaged'):
        DQN.load('dqn')


def test_a_damaged_model_file_of_a_save_is_one_line(saved, workdir):
    shutil.copytree(saved / 'ppo', 'ppo')
    model = os.path.join('ppo', manifest_of('ppo')['files']['model'])
    changed = damages(model)['a byte of array data']
    with open(model, 'wb') as file:
        file.write(changed)
    with pytest.raises(ValueError, match=rf"^{model} is damaged: Bad CRC-32 for file 'model/\d+.npy'; load another "
                                         r'save$'):
        PPO.load('ppo')


def edited(manifest: dict, **changes) -> str:
    return json.dumps({**manifest, **changes})


def without(manifest: dict, key: str) -> str:
    return json.dumps({name: value for name, value in manifest.items() if name != key})


@pytest.mark.parametrize('edit, problem', [
    pytest.param(lambda manifest: '', 'expected JSON, got Expecting value: line 1 column 1 (char 0)', id='emptied'),
    pytest.param(lambda manifest: json.dumps(manifest)[:200], 'expected JSON, got Unterminated string starting at: ',
                 id='cut'),
    pytest.param(lambda manifest: '[1, 2]', 'expected a JSON object, got list', id='a list'),
    pytest.param(lambda manifest: without(manifest, 'files'), 'expected a field "files", found none', id='no files'),
    pytest.param(lambda manifest: without(manifest, 'training_state'),
                 'expected a field "training_state", found none', id='no training state'),
    pytest.param(lambda manifest: edited(manifest, steps='2048'), 'expected "steps" to be an integer, got "2048"',
                 id='steps a string'),
    pytest.param(lambda manifest: edited(manifest, files=[]), 'expected "files" to be an object, got []',
                 id='files a list'),
    pytest.param(lambda manifest: edited(manifest, files={}), 'expected "files" to name the model file, found none',
                 id='no model file'),
    pytest.param(lambda manifest: edited(manifest, files={'model': '../w.tf'}),
                 'expected files named as save names them (model-000000001536-cd73761e.npz), got "../w.tf"',
                 id='a file elsewhere'),
    pytest.param(lambda manifest: edited(manifest, env={'n_envs': 2}), 'expected the env to have an "env_id" string',
                 id='no env id'),
    pytest.param(lambda manifest: edited(manifest, hyperparameters={**manifest['hyperparameters'], 'lr': 'fast'}),
                 "expected lr to be a number, got 'fast'", id='lr a string'),
    pytest.param(lambda manifest: edited(manifest, training_state={'random_state': {}}),
                 "its training_state does not fit PPO: ValueError('state must be for a PCG64 RNG')",
                 id='no random state'),
])
def test_an_edited_manifest_is_one_line(saved, workdir, xagents_cli, edit, problem):
    shutil.copytree(saved / 'ppo', 'ppo')
    manifest = manifest_of('ppo')
    with open('ppo/agent.json', 'w') as file:
        file.write(edit(manifest))
    with pytest.raises(ValueError) as error:
        PPO.load('ppo')
    assert str(error.value).startswith(f'ppo/agent.json is damaged: {problem}')
    assert str(error.value).endswith('; load another save')
    status, _, err = xagents_cli('play', 'ppo', '--env', 'CartPole-v1', '--weights', 'ppo')
    assert status == 2 and one_line(err) == f'xagents play ppo: error: {error.value}'


def test_a_manifest_naming_a_missing_file_is_one_line(saved, workdir, xagents_cli):
    shutil.copytree(saved / 'ppo', 'ppo')
    (model,) = glob.glob('ppo/model-*.npz')
    os.remove(model)
    status, _, err = xagents_cli('play', 'ppo', '--env', 'CartPole-v1', '--weights', 'ppo')
    assert status == 2 and one_line(err) == (f'xagents play ppo: error: ppo is incomplete: {os.path.basename(model)} '
                                             'is missing; load another save')


def test_a_save_of_another_version_names_the_parameter_it_does_not_take(saved, workdir, xagents_cli):
    shutil.copytree(saved / 'ppo', 'ppo')
    manifest = manifest_of('ppo')
    manifest['xagents_version'] = '2.5.0'
    manifest['hyperparameters']['clip_schedule'] = 'linear'
    with open('ppo/agent.json', 'w') as file:
        json.dump(manifest, file)
    message = (f"ppo/agent.json lists the hyperparameter 'clip_schedule', which PPO of xagents {__version__} does not take "
               "(saved by xagents 2.5.0): load it with that version, or delete 'clip_schedule' from ppo/agent.json "
               'to load it with this one')
    status, _, err = xagents_cli('train', 'ppo', *SMALL, '--weights', 'ppo', '--max-steps', '64')
    assert status == 2 and one_line(err) == f'xagents train ppo: error: {message}'
    with pytest.raises(ValueError, match=r'^ppo/agent.json lists the hyperparameter .clip_schedule.'):
        PPO.load('ppo')
    del manifest['hyperparameters']['clip_schedule']
    manifest['env']['frame_skip'] = 4
    with open('ppo/agent.json', 'w') as file:
        json.dump(manifest, file)
    with pytest.raises(ValueError, match=r"^ppo/agent.json lists the env setting 'frame_skip', which PPO of xagents "):
        PPO.load('ppo')


@pytest.mark.parametrize('content, problem', [
    pytest.param('{"eval_reward": 41.5, "st', 'expected JSON, got Unterminated string starting at: line 1 column 23 '
                 '(char 22)', id='cut'),
    pytest.param('', 'expected JSON, got Expecting value: line 1 column 1 (char 0)', id='emptied'),
    pytest.param('{"step": 256}', 'expected a field "eval_reward", found none', id='no score'),
    pytest.param('{"eval_reward": "high", "step": 256}', 'expected "eval_reward" to be a number, got "high"',
                 id='a score in words'),
    pytest.param('{"eval_reward": NaN, "step": 256}', 'expected "eval_reward" to be finite, got nan',
                 id='no score at all'),  # read as a number, it would never be beaten
    pytest.param('{"eval_reward": 41.5, "step": 256, "crc32": "0"}', 'expected "crc32" to be an integer, got "0"',
                 id='a checksum in words'),
    pytest.param('{"eval_reward": 41.5, "step": 256, "crc33": 0}',
                 'expected the fields eval_reward, step and crc32, got "crc33" too', id='a misnamed field'),
])
def test_a_damaged_best_eval_score_is_one_line_and_touches_nothing(workdir, xagents_cli, content, problem):
    """best-eval.json keeps best-eval's score, so that a resumed run replaces best-eval only with a better agent."""
    status, _, err = xagents_cli('train', 'ppo', *SMALL, '--max-steps', '256', '--save-dir', 'saves',
                                 '--save-frequency', '128', '--eval-frequency', '128', '--eval-episodes', '1')
    assert status == 0, err
    with open('saves/best-eval.json', 'w') as file:
        file.write(content)
    before = {path: open(path, 'rb').read() for path in glob.glob('saves/**', recursive=True) if os.path.isfile(path)}
    status, _, err = xagents_cli('train', 'ppo', *SMALL, '--max-steps', '128', '--save-dir', 'saves',
                                 '--weights', 'saves/step-000000000256', '--eval-frequency', '128')
    assert status == 2 and one_line(err) == (
        f'xagents train ppo: error: saves/best-eval.json is damaged: {problem}; delete it to let the next evaluation '
        'replace best-eval, however it scores')
    assert {path: open(path, 'rb').read() for path in glob.glob('saves/**', recursive=True)
            if os.path.isfile(path)} == before


@pytest.mark.parametrize('cut', ['best-eval.json of no agent', 'best-eval/agent.json'])
def test_a_best_eval_record_cut_mid_json_is_refused_on_resume_and_touches_nothing(workdir, xagents_cli, cut):
    """Both are written whole (atomically), so one cut short is damage, refused in one line naming it: the score even
    where best-eval holds no agent (a kill in its first save), and best-eval's manifest (it was saved over)."""
    status, _, err = xagents_cli('train', 'ppo', *SMALL, '--max-steps', '256', '--save-dir', 'saves',
                                 '--save-frequency', '128', '--eval-frequency', '128', '--eval-episodes', '1')
    assert status == 0, err
    path = 'saves/' + cut.split()[0]
    if path == 'saves/best-eval.json':
        shutil.rmtree('saves/best-eval')
    record = open(path, 'rb').read()
    with open(path, 'wb') as file:
        file.write(record[:len(record) // 2])
    before = {path: open(path, 'rb').read() for path in glob.glob('saves/**', recursive=True) if os.path.isfile(path)}
    status, _, err = xagents_cli('train', 'ppo', *SMALL, '--max-steps', '128', '--save-dir', 'saves',
                                 '--weights', 'saves/step-000000000256', '--eval-frequency', '128')
    fix = ('delete it to let the next evaluation replace best-eval, however it scores' if path.endswith('.json') and
           'best-eval/' not in path else 'load another save, or delete saves/best-eval and saves/best-eval.json to '
           'let the next evaluation save both again')
    assert status == 2 and re.fullmatch(rf'xagents train ppo: error: {path} is damaged: expected JSON, got [^;]+; '
                                        rf'{fix}', one_line(err)), err
    assert {path: open(path, 'rb').read() for path in glob.glob('saves/**', recursive=True)
            if os.path.isfile(path)} == before


def test_a_changed_byte_in_the_best_eval_score_is_one_line_on_resume_and_touches_nothing(workdir, xagents_cli):
    status, _, err = xagents_cli('train', 'ppo', *SMALL, '--max-steps', '256', '--save-dir', 'saves',
                                 '--save-frequency', '128', '--eval-frequency', '128', '--eval-episodes', '1')
    assert status == 0, err
    record = open('saves/best-eval.json', 'rb').read()
    digit = re.search(rb'"eval_reward": (\d)', record).start(1)
    changed = record[:digit] + bytes([ord('1') + (record[digit] - ord('0')) % 8]) + record[digit + 1:]
    with open('saves/best-eval.json', 'wb') as file:
        file.write(changed)  # another score, as valid JSON as the one written
    before = {path: open(path, 'rb').read() for path in glob.glob('saves/**', recursive=True) if os.path.isfile(path)}
    status, _, err = xagents_cli('train', 'ppo', *SMALL, '--max-steps', '128', '--save-dir', 'saves',
                                 '--weights', 'saves/step-000000000256', '--eval-frequency', '128')
    line = one_line(err)
    assert status == 2 and re.fullmatch(r'xagents train ppo: error: saves/best-eval.json is damaged: expected "crc32" '
                                        r'to be \d+, the CRC-32 of its fields, got \d+; delete it to let the next '
                                        r'evaluation replace best-eval, however it scores', line), line
    assert {path: open(path, 'rb').read() for path in glob.glob('saves/**', recursive=True)
            if os.path.isfile(path)} == before


def test_every_single_byte_change_of_a_best_eval_score_is_refused_or_changes_nothing_read(workdir):
    """Each byte of a score as a run writes it, changed in turn to each of a few others: the record reads as the same
    score (a space that became a tab), or is refused naming the file, never read as another score."""
    agent = PPO.from_env('CartPole-v1', seed=0, n_envs=2, n_steps=64, quiet=True)
    agent.fit(max_steps=256, save_dir='saves', eval_frequency=128, eval_episodes=1)
    record = open('saves/best-eval.json', 'rb').read()
    score = Saves('saves').best_eval
    assert json.loads(record)['eval_reward'] == score
    refused = 0
    for offset in range(len(record)):
        for byte in {record[offset] ^ 0x01, record[offset] ^ 0x10, ord('9') - (record[offset] == ord('9')), ord('\t')}:
            with open('saves/best-eval.json', 'wb') as file:
                file.write(record[:offset] + bytes([byte]) + record[offset + 1:])
            try:
                assert Saves('saves').best_eval == score, (offset, byte)
            except ValueError as error:
                assert str(error).startswith('saves/best-eval.json is damaged: '), error
                refused += 1
    assert refused > 3 * len(record)  # most changes break the record; the rest change only its layout


# Run as python -c KILLED_AT PATTERN ARGS...: SIGKILL the process when a file whose path matches PATTERN is
# about to take its place (os.replace raises the audit event os.rename): as if killed there in a save.
KILLED_AT = '''
import os, re, signal, sys
pattern = re.compile(sys.argv.pop(1))
def kill_there(event, args):
    if event == 'os.rename' and pattern.search(os.fspath(args[1])):
        os.kill(os.getpid(), signal.SIGKILL)
sys.addaudithook(kill_there)
'''


def hidden(directory: str) -> list[str]:
    return sorted(name for _, _, names in os.walk(directory) for name in names if name.startswith('.'))


@pytest.mark.parametrize('moment', [r'best-eval/model-\d+-\w+\.npz$', r'best-eval/agent\.json$'])
def test_a_kill_during_a_save_into_best_eval_is_cleaned_by_the_next_run(workdir, xagents_cli, moment):
    """Killed in its first best-eval save (as its model file, or its manifest, is about to be renamed into place):
    best-eval holds no manifest, a hidden temporary, maybe a model file; best-eval.json a score of no agent."""
    run = [sys.executable, '-c', KILLED_AT + 'from xagents.app.cli import main; main(sys.argv[1:])', moment, 'train',
           'ppo', *SMALL, '--max-steps', '1024', '--save-dir', 'saves', '--save-frequency', '128', '--eval-frequency',
           '256', '--eval-episodes', '1']
    killed = subprocess.run(run, capture_output=True, text=True)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert sorted(os.listdir('saves')) == ['best-eval', 'best-eval.json', 'step-000000000128']
    assert 'agent.json' not in os.listdir('saves/best-eval') and hidden('saves')  # what the kill left

    status, out, err = xagents_cli('train', 'ppo', *SMALL, '--max-steps', '256', '--save-dir', 'saves',
                                   '--weights', 'saves/step-000000000128', '--eval-frequency', '256',
                                   '--eval-episodes', '1')
    assert status == 0, err
    assert 'left by an interrupted save' in out
    assert hidden('saves') == []
    best = PPO.load('saves/best-eval')  # saved anew: the score of no agent was not kept
    assert json.load(open('saves/best-eval.json'))['step'] == best.steps == 384
    assert sorted(os.listdir('saves/best-eval')) == ['agent.json', manifest_of('saves/best-eval')['files']['model']]


def test_the_next_save_into_a_directory_removes_what_a_killed_save_left(saved, workdir):
    shutil.copytree(saved / 'ppo', 'ppo')
    first = manifest_of('ppo')
    save_again = "from xagents import PPO; agent = PPO.load('ppo'); agent.fit(max_steps=128); agent.save('ppo')"
    killed = subprocess.run([sys.executable, '-c', KILLED_AT + save_again, r'ppo/agent\.json$'], capture_output=True,
                            text=True)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert len(hidden('ppo')) == 1 and len(glob.glob('ppo/model-*.npz')) == 2  # the new model file, not yet named
    agent = PPO.load('ppo')
    assert agent.steps == first['steps']  # the previous save, whole
    agent.save('ppo')
    assert sorted(os.listdir('ppo')) == ['agent.json', manifest_of('ppo')['files']['model']]


def flipped_in_column(path: str, column: str) -> bytes:
    """``path`` with one bit changed in the middle of ``column``'s values."""
    chunk = next(chunk for chunk in (pq.ParquetFile(path).metadata.row_group(0).column(i) for i in range(5))
                 if chunk.path_in_schema == column)
    changed = bytearray(open(path, 'rb').read())
    changed[chunk.data_page_offset + chunk.total_compressed_size // 2] ^= 0x01
    return bytes(changed)


@pytest.mark.parametrize('column', ['episode_reward', 'step'])
def test_a_changed_byte_in_a_history_is_one_line(saved, workdir, xagents_cli, column):
    """Without page checksums such a change reads as another reward or step."""
    shutil.copy(saved / 'w.tf', 'w.tf')
    with open('h.parquet', 'wb') as file:
        file.write(flipped_in_column(str(saved / 'h.parquet'), column))
    problem = ('h.parquet is not a whole parquet history file (could not verify page integrity, CRC checksum '
               'verification failed for page_ordinal 0); use a copy of it, or another history file')
    status, _, err = xagents_cli('train', 'ppo', *SMALL, '--weights', 'w.tf', '--history-checkpoint', 'h.parquet',
                                 '--max-steps', '64')
    assert status == 2 and one_line(err) == f'xagents train ppo: error: {problem}'
    status, _, err = xagents_cli('plot', 'h.parquet', '--env', 'CartPole-v1', '--output', 'curves.png')
    assert status == 2 and one_line(err) == f'xagents plot: error: {problem}'
    with pytest.raises(ValueError, match='h.parquet is not a whole parquet history file'):
        read_history('h.parquet')


def test_a_damaged_benchmark_record_is_one_line(workdir, xagents_cli):
    argv = ['benchmark', '--agents', 'ppo', '--envs', 'CartPole-v1', '--target', '15', '--seeds', '0',
            '--max-steps', '256', '--eval-frequency', '128', '--output', 'out']
    status, _, err = xagents_cli(*argv)
    assert status == 0, err
    path = 'out/runs/ppo-CartPole-v1-0.json'
    record = json.load(open(path))
    for content, problem in ((json.dumps(record)[:50], 'expected JSON, got '),
                             (json.dumps({**record, 'evaluations': 'none'}),
                              'expected "evaluations" to be a list, got "none"')):
        with open(path, 'w') as file:
            file.write(content)
        for extra in ([], ['--summarize-only']):
            status, _, err = xagents_cli(*argv, *extra)
            line = one_line(err)
            assert status == 2 and line.startswith(f'xagents benchmark: error: {path} is damaged: {problem}'), line
            assert line.endswith('; remove it to run that seed again')
