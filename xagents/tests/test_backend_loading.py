"""A Keras backend that is unknown, missing or cannot load is one line with what fixes it, from every command and from
Python; JAX's one-thread limit for Ray workers is one XLA accepts and keeps to.

Each command runs in a process of its own whose ``PYTHONPATH`` makes a backend missing (an import hook that finds no
such module, as for a package never installed) or broken (a package of that name that raises while it loads), with
a ``KERAS_HOME`` of its own (Keras reads ``keras.json`` there)."""
import importlib.util
import json
import os
import re
import subprocess
import sys

import pytest

from xagents.utils.extras import install_command

REPOSITORY = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MISSING = '''import os, sys
class Missing:
    """Finds none of the modules named in MISSING: they import as if never installed."""
    def find_spec(self, name, path=None, target=None):
        if name.partition('.')[0] in os.environ.get('MISSING', '').split(','):
            raise ModuleNotFoundError(f'No module named {name!r}', name=name)
sys.meta_path.insert(0, Missing())
'''
INSTALLS = {'jax': install_command('jax'), 'torch': install_command('torch'),
            'tensorflow': "pip install 'tensorflow>=2.16'"}
REINSTALLS = {'jax': 'pip install --force-reinstall --no-deps jax jaxlib', 'torch':
              'pip install --force-reinstall --no-deps torch', 'tensorflow':
              'pip install --force-reinstall --no-deps tensorflow'}


@pytest.fixture
def world(tmp_path):
    """Run a command with some modules missing or broken: ``run(argv, missing=(), broken={}, backend=None,
    keras_json=None)`` returns the finished process; ``broken`` maps a module to the line its import raises."""
    hooks = tmp_path / 'hooks'
    hooks.mkdir()
    (hooks / 'sitecustomize.py').write_text(MISSING)
    home = tmp_path / 'keras-home'
    home.mkdir()

    def run(argv, missing=(), broken=None, backend=None, keras_json=None, cwd=tmp_path):
        for module, line in (broken or {}).items():
            (hooks / module).mkdir(exist_ok=True)
            (hooks / module / '__init__.py').write_text(line + '\n')
        if keras_json is not None:
            (home / 'keras.json').write_text(json.dumps({'backend': keras_json}))
        env = {name: value for name, value in os.environ.items() if name != 'KERAS_BACKEND'}
        env.update(PYTHONPATH=os.pathsep.join([str(hooks), REPOSITORY, os.environ.get('PYTHONPATH', '')]),
                   MISSING=','.join(missing), KERAS_HOME=str(home), TF_CPP_MIN_LOG_LEVEL='3')
        if backend:
            env['KERAS_BACKEND'] = backend
        return subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env, cwd=cwd)

    return run


def xagents(*argv):
    return [sys.executable, '-m', 'xagents', *argv]


GPU_SCRIPT = [sys.executable, os.path.join(REPOSITORY, 'benchmarks', 'gpu.py')]
COMMANDS = {
    'train': xagents('train', 'dqn', '--env', 'CartPole-v1', '--max-steps', '100'),
    'play': xagents('play', 'dqn', '--env', 'CartPole-v1', '--weights', 'dqn.weights.h5'),
    'tune': xagents('tune', 'dqn', '--env', 'CartPole-v1', '--trials', '1'),
    'benchmark': xagents('benchmark', '--agents', 'dqn', '--envs', 'CartPole-v1', '--target', '100', '--seeds', '0',
                         '--max-steps', '100', '--output', 'out'),
    'gpu.py': [*GPU_SCRIPT, '--runs', 'ppo-cartpole', '--max-steps', '100'],
}


def assert_one_line(process, *parts):
    """Exit status 2 and one line on stderr that holds every one of ``parts``, no traceback."""
    assert process.returncode == 2, process.stderr
    assert len(process.stderr.strip().splitlines()) == 1 and 'Traceback' not in process.stderr, process.stderr
    for part in parts:
        assert part in process.stderr, process.stderr


@pytest.mark.parametrize('command', list(COMMANDS))
def test_a_missing_backend_is_one_line_with_its_pip_command_in_every_command(world, tmp_path, command):
    given = ['--backend', 'jax'] if command != 'gpu.py' else []
    process = world(COMMANDS[command] + given, missing=['jax'], backend='jax' if command == 'gpu.py' else None)
    assert_one_line(process, "jax backend", 'is not installed', INSTALLS['jax'])
    assert 'xagents[' not in process.stderr  # the package index's xagents is another project
    assert not os.path.exists(tmp_path / 'out')  # benchmark: no run started, no folder made


@pytest.mark.parametrize('source', ['--backend', 'KERAS_BACKEND', 'keras.json'])
@pytest.mark.parametrize('backend', ['jax', 'torch'])
def test_a_missing_backend_is_one_line_whichever_way_it_was_chosen(world, source, backend):
    argv = COMMANDS['train'] + (['--backend', backend] if source == '--backend' else [])
    process = world(argv, missing=[backend], backend=backend if source == 'KERAS_BACKEND' else None,
                    keras_json=backend if source == 'keras.json' else None)
    said = {'--backend': f"{backend} backend is", 'KERAS_BACKEND': '(KERAS_BACKEND)', 'keras.json': 'keras.json)'}
    assert_one_line(process, 'is not installed', INSTALLS[backend], said[source])
    assert ('CPU build' in process.stderr) == (backend == 'torch')


def test_a_missing_tensorflow_by_default_says_how_to_install_it_or_choose_another(world):
    process = world(COMMANDS['train'], missing=['tensorflow'])
    assert_one_line(process, 'tensorflow backend (the default', INSTALLS['tensorflow'], 'jax or torch')


@pytest.mark.parametrize('backend, raised', [
    ('jax', 'raise ImportError("jaxlib is version 0.1, expected 0.10 (planted)")'),
    ('torch', 'raise OSError("libtorch_cpu.so: cannot open shared object file (planted)")'),
    ('tensorflow', 'raise RuntimeError("the TensorFlow runtime is broken (planted)")'),
])
@pytest.mark.parametrize('command', ['train', 'play', 'benchmark'])
def test_a_backend_that_cannot_load_is_one_line_with_its_reason_and_reinstall(world, tmp_path, backend, raised,
                                                                             command):
    process = world(COMMANDS[command] + ['--backend', backend], broken={backend: raised})
    assert_one_line(process, f'{backend} backend is installed but cannot load', '(planted)', REINSTALLS[backend])
    assert not os.path.exists(tmp_path / 'out')


def test_tune_and_the_gpu_script_say_a_backend_cannot_load_in_one_line(world):
    broken = {'torch': 'raise OSError("libtorch_cpu.so: cannot open shared object file (planted)")'}
    assert_one_line(world(COMMANDS['tune'], broken=broken, backend='torch'), 'xagents tune: error:',
                    '(KERAS_BACKEND) is installed but cannot load', REINSTALLS['torch'])
    assert_one_line(world(COMMANDS['gpu.py'], broken=broken, keras_json='torch'), 'benchmarks/gpu.py: error:',
                    'keras.json) is installed but cannot load', REINSTALLS['torch'])


@pytest.mark.parametrize('command', list(COMMANDS))
@pytest.mark.parametrize('source', ['KERAS_BACKEND', 'keras.json'])
def test_an_unknown_backend_name_is_one_line_naming_the_ones_xagents_runs_on(world, tmp_path, command, source):
    process = world(COMMANDS[command], backend='jaxx' if source == 'KERAS_BACKEND' else None,
                    keras_json='jaxx' if source == 'keras.json' else None)
    assert_one_line(process, "expected a backend among tensorflow, jax, torch, got 'jaxx'", source)
    assert not os.path.exists(tmp_path / 'out')


def test_an_unknown_backend_flag_is_refused_by_every_command(world):
    for command in ('train', 'play', 'tune', 'benchmark'):
        process = world(COMMANDS[command] + ['--backend', 'jaxx'])
        assert_one_line(process, f'xagents {command}: error: argument --backend:', "got 'jaxx'")


@pytest.mark.parametrize('code', ['import xagents; xagents.DQN', 'from xagents import backend',
                                  'import xagents; xagents.use_backend("jax"); from xagents import PPO'])
def test_python_gets_one_import_error_naming_the_fix(world, code):
    script = f'''
try:
    {code}
except ImportError as error:
    print(type(error).__name__, '|', error)
'''
    process = world([sys.executable, '-c', script], missing=['jax'], backend='jax')
    assert process.returncode == 0 and process.stderr == '', process.stderr
    kind, _, message = process.stdout.strip().partition(' | ')
    assert kind == 'BackendError' and '\n' not in message and INSTALLS['jax'] in message, process.stdout


@pytest.mark.parametrize('argv, message', [
    (['--max-steps', '-1'], 'expected --max-steps >= 0, got -1 (0: no cap)'),
    (['--eval-episodes', '0'], 'expected --eval-episodes >= 1, got 0'),
    (['--eval-frequency', '0'], 'expected --eval-frequency >= 1, got 0'),
    (['--atari-steps', '-5'], 'expected --atari-steps >= 1, got -5'),
    (['--mujoco-steps', '0'], 'expected --mujoco-steps >= 1, got 0'),
    (['--seed', '-1'], 'expected --seed >= 0, got -1'),
    (['--output', '.'], '--output: . is a directory, expected a file name'),
    (['--max-steps', 'many'], "argument --max-steps: invalid int value: 'many'"),
    (['--runs', 'ppo-mars'], "argument --runs: invalid choice: 'ppo-mars'"),
])
def test_the_gpu_script_checks_its_flags_before_it_builds_an_agent(world, argv, message):
    process = world([*GPU_SCRIPT, *argv], broken={'keras': 'raise RuntimeError("Keras was loaded")'})
    assert_one_line(process, f'benchmarks/gpu.py: error: {message}')


def test_the_gpu_script_says_zero_max_steps_is_no_cap(world):
    process = world([*GPU_SCRIPT, '--help'])
    assert process.returncode == 0 and '(default: 0, no cap)' in ' '.join(process.stdout.split())


LIMITED = '''
import json, os
from xagents import backend  # a Ray worker's start: the backend loaded, nothing computed yet
backend.limit_threads()
import jax
import jax.numpy as jnp

def ticks():
    """CPU ticks each thread of this process has spent."""
    spent = {}
    for thread in os.listdir('/proc/self/task'):
        try:
            fields = open(f'/proc/self/task/{thread}/stat').read().rsplit(')', 1)[1].split()
        except OSError:
            continue
        spent[thread] = int(fields[11]) + int(fields[12])
    return spent

product = jax.jit(lambda a: (a @ a @ a).sum())
matrix = jnp.ones((1000, 1000), jnp.float32)
product(matrix).block_until_ready()
before = ticks()
for _ in range(25):
    product(matrix).block_until_ready()
after = ticks()
print(json.dumps({'flags': os.environ['XLA_FLAGS'],
                  'busy': sorted((after[name] - before.get(name, 0) for name in after), reverse=True)}))
'''


@pytest.mark.skipif(importlib.util.find_spec('jax') is None, reason='JAX is not installed')
@pytest.mark.skipif(not os.path.isdir('/proc/self/task') or len(os.sched_getaffinity(0)) < 2,
                    reason="counts each thread's CPU time in /proc, on two cores or more")
def test_jax_workers_compute_on_one_thread_with_flags_xla_accepts(world):
    process = world([sys.executable, '-c', LIMITED], backend='jax')
    assert process.returncode == 0 and 'Unknown flag' not in process.stderr, process.stderr  # XLA aborts on those
    result = json.loads(process.stdout.strip().splitlines()[-1])
    assert all(re.fullmatch(r'--\w+=\S+', flag) for flag in result['flags'].split()), result['flags']
    busiest, *others = result['busy']
    assert busiest >= 20 and max(others) <= busiest / 10, result['busy']  # one thread did the products
