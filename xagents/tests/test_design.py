"""The design's promises: arrows point one way, and an agent is its own package plus one registry line."""
from __future__ import annotations

import ast
import os
import pathlib

import pandas as pd
import pytest
from keras import ops

import xagents
from xagents import backend
from xagents.agent.on_policy import OnPolicy
from xagents.registry import AGENTS

PACKAGE = pathlib.Path(xagents.__file__).parent
MODULES = sorted(path for path in PACKAGE.rglob('*.py') if 'tests' not in path.relative_to(PACKAGE).parts)
ALGORITHMS = sorted({entry.partition(':')[0].rsplit('.', 1)[0] for entry in AGENTS.values()})  # xagents.ppo...
# Each layer imports only from its own and the ones before it, each a folder named for what it holds: helpers that
# know nothing of learning, what differs per Keras backend, shared maths, environments, networks, replay, files, a
# run's machinery, the agents' core, the algorithms, the registry of algorithms, the application (commands).
# Re-exports sit with what they re-export (xagents.utils.common, the helpers users reach for, with the files).
LAYERS = [['xagents.utils', 'xagents.version'], ['xagents.backend'], ['xagents.maths'], ['xagents.envs'],
          ['xagents.networks'], ['xagents.replay'], ['xagents.storage', 'xagents.utils.common'],
          ['xagents.training', 'xagents.callbacks'], ['xagents.agent', 'xagents.base'],
          ALGORITHMS, ['xagents.registry'], ['xagents.app', 'xagents.__main__', 'xagents']]


# Modules below the registry that import a module named at run time, and what they import: never an xagents module.
NAMED_AT_RUN_TIME = {'xagents.envs.creation': "the user's env module of an id like my_envs:MyEnv-v0",
                     'xagents.storage.export_parts': 'the optional export packages (tf2onnx, onnx, onnxruntime, '
                                                     'ai_edge_litert)'}


def layer(module: str) -> int:
    """The layer of an xagents module (the most specific prefix wins: ``xagents`` itself is the top)."""
    matches = [(len(prefix), index) for index, prefixes in enumerate(LAYERS) for prefix in prefixes
               if module == prefix or module.startswith(prefix + '.')]
    return max(matches)[1]


def module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix('').parts
    return '.'.join(parts[:-1] if parts[-1] == '__init__' else parts)


def imports(path: pathlib.Path) -> tuple[set[str], bool]:
    """The xagents modules a source file imports at run time: ``import a.b``, ``from a.b import c`` (not under
    ``if TYPE_CHECKING``) and ``importlib.import_module('a.b')``; and whether it imports a module named at run
    time (``import_module(name)``), which only the registry and the application may do."""
    tree = ast.parse(path.read_text())
    typing_only = {id(node) for block in ast.walk(tree) if isinstance(block, ast.If)
                   and getattr(block.test, 'id', None) == 'TYPE_CHECKING' for node in ast.walk(block)}
    found, dynamic = set(), False
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module == 'xagents' and not node.level:
            found.update(f'xagents.{alias.name}' for alias in node.names)  # from xagents import backend
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
        elif (isinstance(node, ast.Call) and getattr(node.func, 'attr', getattr(node.func, 'id', None)) == 'import_module'):
            argument = node.args[0] if node.args else None
            if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
                found.add(argument.value)
            else:
                dynamic = True
    return {module for module in found if module == 'xagents' or module.startswith('xagents.')}, dynamic


@pytest.mark.parametrize('path', MODULES, ids=lambda path: str(path.relative_to(PACKAGE)))
def test_arrows_point_one_way(path):
    """No module imports from a layer above its own, by name or through importlib (tests aside, every module)."""
    own = layer(module_name(path))
    found, dynamic = imports(path)
    for module in found:
        assert layer(module) <= own, f'{module_name(path)} imports {module}, a layer above it'
    assert not dynamic or own >= layer('xagents.registry') or module_name(path) in NAMED_AT_RUN_TIME, (
        f'{module_name(path)} imports a module named at run time')


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The modules of ``graph`` (module -> the modules it imports) that reach themselves again through imports:
    each strongly connected group, sorted."""
    reach = {module: set() for module in graph}
    for module in graph:
        frontier = [module]
        while frontier:
            for imported in graph.get(frontier.pop(), ()):
                if imported in graph and imported not in reach[module]:
                    reach[module].add(imported)
                    frontier.append(imported)
    groups = {tuple(sorted(other for other in reach[module] if module in reach[other])) for module in graph
              if module in reach[module]}
    return sorted(list(group) for group in groups)


def test_no_module_imports_itself_back_at_run_time():
    """Run-time imports form no circle, inside a layer either (``if TYPE_CHECKING`` hints aside): each module loads
    after everything it needs, whichever is imported first."""
    # (a package naming itself, as in ``from xagents.backend import jax_backend`` in its __init__, is no circle)
    graph = {module_name(path): imports(path)[0] - {module_name(path)} for path in MODULES}
    assert import_cycles(graph) == []
    assert import_cycles({'a': {'b'}, 'b': {'c'}, 'c': {'a'}, 'd': {'a'}}) == [['a', 'b', 'c']]


def test_the_layering_test_sees_importlib_imports_and_type_only_ones_apart(tmp_path):
    source = tmp_path / 'probe.py'
    source.write_text('import importlib\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from xagents.app import cli\n'
                      "importlib.import_module('xagents.ppo.agent')\nname = 'x'\nimportlib.import_module(name)\n"
                      'from xagents import registry\n')
    assert imports(source) == ({'xagents.ppo.agent', 'xagents.registry'}, True)
    assert layer('xagents.envs.creation') < layer('xagents.training.fit') < layer('xagents.agent.base') < layer(
        'xagents.ppo.agent') < layer('xagents.registry') < layer('xagents.app.tuning') and len(MODULES) > 50


class Toy(OnPolicy):
    """REINFORCE with a value baseline on one actor-critic model: the smallest agent the machinery trains."""

    def __init__(self, envs, model: str | None = None, *, n_steps: int = 16, lr: float = 1e-3, **kwargs) -> None:
        """
        Args:
            model: Actor-critic model: a .cfg file (default: the on-policy one).
            n_steps: Steps per env in each rollout.
            lr: Learning rate.
        """
        super().__init__(envs, n_steps=n_steps, lr=lr, **kwargs)
        self.model = self.build_actor_critic(model)
        self.optimizer = self.make_optimizer('model')

    @backend.compiled_method
    def train_step(self, observations, actions, log_probs, advantages, returns) -> dict:
        def loss():
            params, values = self.model(observations)
            new_log_probs, _ = self.log_prob_entropy(params, actions)
            value = -ops.mean(new_log_probs * advantages) + ops.mean((returns - values[:, 0]) ** 2)
            return value, value

        (_, loss), gradients = backend.value_and_grad(loss, self.model.trainable_variables)
        self.optimizer.apply(gradients, self.model.trainable_variables)
        return {'loss': loss}


def test_an_agent_defined_outside_the_package_trains_through_the_command_line(monkeypatch, workdir, xagents_cli):
    """The "add an agent" steps of docs/design.md: a class (here in this test), one registry line, nothing else."""
    monkeypatch.setitem(AGENTS, 'toy', f'{__name__}:Toy')
    status, out, _ = xagents_cli('train', 'toy')
    assert status == 0 and '--n-steps N' in out and 'Steps per env in each rollout. (default: 16)' in ' '.join(out.split())
    status, out, err = xagents_cli('train', 'toy', '--env', 'CartPole-v1', '--max-steps', '3000', '--seed', '0',
                                   '--checkpoints', 'w.tf', '--history-checkpoint', 'h.parquet')
    assert status == 0, err
    assert 'Maximum steps (3000) reached' in out and len(pd.read_parquet('h.parquet')) > 10
    status, out, err = xagents_cli('play', 'toy', '--env', 'CartPole-v1', '--weights', 'w.tf', '--max-steps', '20')
    assert status == 0 and 'Episode reward' in out, err
    assert os.path.getsize('w.tf') > 0


def test_ci_runs_exactly_the_test_command_the_readme_gives():
    readme = (PACKAGE.parent / 'README.md').read_text()
    section = readme.split('\n## Tests\n', 1)[1]
    command = section.split('```sh\n', 1)[1].split('\n```', 1)[0].strip()
    install, _, run = command.partition(' && ')  # on a fresh machine the command installs what the tests need
    assert install.startswith('pip install ') and run.startswith('python -m pytest ') and len(command.splitlines()) == 1
    # (`set -e` lets a failure inside an && list pass: CI exits with it)
    assert f'{command} || exit 1' in (PACKAGE.parent / '.ci' / 'run').read_text().splitlines()
    assert readme.count('pytest') == command.count('pytest'), 'one command in the README names the test runner'
