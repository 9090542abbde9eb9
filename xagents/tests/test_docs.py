"""The documentation site as a reader meets it: its examples run, its claims match the code, it builds without a
warning and renders in a browser; the README stays a door into it.

Every ```python and ```sh block of a page runs unless the line before it says why not (``<!-- not run: REASON
-->``) or names the file the block is (``<!-- file: NAME -->``, written where the page's examples run). A page's
blocks run in order in one empty directory, sh through the installed ``xagents`` command, python in a fresh
interpreter each.
"""
from __future__ import annotations

import concurrent.futures
import functools
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import NamedTuple

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / 'docs'
PAGES = sorted(DOCS.rglob('*.md')) + [ROOT / 'README.md']
FENCE = re.compile(r'^```(\w*)[^\n]*\n(.*?)^```$', re.M | re.S)
MARKER = re.compile(r'<!--\s*(not run|file):\s*(.*?)\s*-->\s*$')
RUN = ('python', 'sh')


class Example(NamedTuple):
    """A fenced block of a page: its language, code, how the page marks it, and where it is."""

    language: str
    code: str
    marker: str | None  # 'not run', 'file' or None (it runs)
    argument: str  # the reason, or the file name
    line: int


def examples(page: Path) -> list[Example]:
    """Every fenced block of ``page``, with the marker on the line before it."""
    text, found = page.read_text(), []
    for match in FENCE.finditer(text):
        before = text[:match.start()].rstrip('\n').rsplit('\n', 1)[-1]
        marker = MARKER.search(before)
        found.append(Example(match.group(1), match.group(2), marker and marker.group(1),
                             marker.group(2) if marker else '', text.count('\n', 0, match.start()) + 1))
    return found


def runs(page: Path) -> bool:
    return any(example.language in RUN and example.marker is None for example in examples(page))


def name(page: Path) -> str:
    return str(page.relative_to(DOCS if DOCS in page.parents else ROOT))


def test_every_marked_block_says_why_or_what():
    marked = [(page, example) for page in PAGES for example in examples(page) if example.marker]
    assert marked, 'the pages mark no block: the marker syntax changed?'
    for page, example in marked:
        assert example.argument, f'{name(page)}:{example.line}: <!-- {example.marker}: ... --> needs a reason or a name'
        if example.marker == 'not run':
            assert example.language in RUN, f'{name(page)}:{example.line}: only python and sh blocks run'


def example_environment() -> dict[str, str]:
    """The reader's shell: this Python's ``xagents`` and ``python`` first on the PATH, nothing shown by wandb."""
    environment = dict(os.environ, WANDB_MODE='offline', WANDB_SILENT='true', TF_CPP_MIN_LOG_LEVEL='3',
                       MPLBACKEND='Agg')
    environment['PATH'] = os.pathsep.join([os.path.dirname(sys.executable), environment.get('PATH', '')])
    return environment


# Pages read right after ``pip install .``: their examples run where the optional extras cannot be imported.
BASE_INSTALL_PAGES = ('getting-started.md',)
EXTRA_MODULES = ('tf2onnx', 'onnx', 'onnxruntime', 'ai_edge_litert', 'ray', 'tensorboard', 'psycopg2', 'pymysql')


def without_extras(environment: dict[str, str], directory: Path) -> dict[str, str]:
    """``environment`` with the extras' modules shadowed by packages whose import fails, as on a plain install."""
    shadows = directory / 'no-extras'
    for module in EXTRA_MODULES:
        (shadows / module).mkdir(parents=True, exist_ok=True)
        (shadows / module / '__init__.py').write_text(f'raise ImportError("{module} is not installed (pip install .)")\n')
    return dict(environment, PYTHONPATH=os.pathsep.join(filter(None, [str(shadows), environment.get('PYTHONPATH')])))


def run_examples(page: Path, directory: Path) -> str | None:
    """Run the examples of ``page`` in order in ``directory``; None, or what the first failing one printed."""
    environment = example_environment()
    if name(page) in BASE_INSTALL_PAGES:
        environment = without_extras(environment, directory)
    for example in examples(page):
        if example.marker == 'file':
            (directory / example.argument).write_text(example.code)
        if example.marker or example.language not in RUN:
            continue
        command = ([sys.executable, '-c', example.code] if example.language == 'python'
                   else ['bash', '-euo', 'pipefail', '-c', example.code])
        result = subprocess.run(command, cwd=directory, env=environment, capture_output=True, text=True, timeout=600)
        if result.returncode:
            return (f'{name(page)}:{example.line} exited {result.returncode}\n{example.code}\n'
                    f'{result.stdout[-2000:]}\n{result.stderr[-3000:]}')
    return None


@pytest.fixture(scope='module')
def page_runs(request, tmp_path_factory):
    """The examples of every page this session tests, started at once, a page per core (each page's own
    examples run in order): the pages' outcomes, as futures."""
    pages = [item.callspec.params['page'] for item in request.session.items
             if getattr(item, 'originalname', None) == 'test_the_examples_of_a_page_run']
    pages.sort(key=lambda page: -sum(example.marker is None and example.language in RUN for example in examples(page)))
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as executor:
        yield {page: executor.submit(run_examples, page, tmp_path_factory.mktemp(page.stem)) for page in pages}
        executor.shutdown(cancel_futures=True)


@pytest.mark.parametrize('page', [page for page in PAGES if runs(page)], ids=name)
def test_the_examples_of_a_page_run(page, page_runs):
    failure = page_runs[page].result()
    assert failure is None, failure


# ------------------------------------------------------------------------------------------- claims
def table_rows(text: str) -> list[str]:
    """The body rows of every Markdown table in ``text`` (not headers or separators)."""
    lines = text.splitlines()
    return [line for index, line in enumerate(lines) if line.startswith('|') and not line.startswith('|---')
            and not (index + 1 < len(lines) and lines[index + 1].startswith('|---'))]


ALGORITHMS = sorted(path.stem for path in (DOCS / 'algorithms').glob('*.md') if path.stem != 'index')


def test_every_agent_has_a_page():
    from xagents.registry import AGENTS

    assert ALGORITHMS == sorted(AGENTS)


@pytest.mark.parametrize('agent', ALGORITHMS)
def test_an_algorithm_page_shows_the_results_page_rows(agent):
    """Results are measured once and written on the Results page; an algorithm page repeats its rows verbatim."""
    page = (DOCS / 'algorithms' / f'{agent}.md').read_text()
    results = (DOCS / 'results.md').read_text().splitlines()
    rows = table_rows(page.split('\n## Results\n', 1)[1])
    assert rows, f'{agent}.md has no results'
    for row in rows:
        assert row in results, f'{agent}.md shows a row the Results page does not have: {row}'
        assert re.match(rf'\|\s*`?{agent}\b', row, re.I), f'{agent}.md shows another agent\'s row: {row}'


def test_the_results_page_opens_with_figures_and_keeps_its_caveats_in_footnotes():
    """A reader looks before reading: figures (beside Stable-Baselines3, beside RL Zoo's Atari curves) come before any
    table, within the page's first words, and the long explanations are footnotes at its end."""
    page = (DOCS / 'results.md').read_text().split('\n# Results\n', 1)[1]
    opening = page.split('\n|', 1)[0]  # up to the first table
    figures = re.findall(r'!\[[^]]*\]\((img/[^)]+)\)', opening)
    assert {'img/versus-sb3.png', 'img/pong-ppo-seeds.png', 'img/breakout-ppo-10m.png'} <= set(figures), figures
    before_figure = re.sub(r'\[\^[\w-]+\]', '', page.split('![', 1)[0])
    assert len(before_figure.split()) <= 60, f'{len(before_figure.split())} words before the first figure'
    for name in re.findall(r'\[\^([\w-]+)\](?!:)', page):
        assert f'\n[^{name}]: ' in page, f'footnote {name} is not defined'
    for figure in figures:
        assert (DOCS / figure).is_file(), figure


def can_i_use(agent: str) -> dict[str, list[bool]]:
    """An algorithm page's "Can I use?" tables: row name -> one yes/no per column."""
    section = (DOCS / 'algorithms' / f'{agent}.md').read_text().split('## Can I use?', 1)[1].split('\n## ', 1)[0]
    table = {}
    for row in table_rows(section):
        first, *cells = [cell.strip() for cell in row.strip('|').split('|')]
        assert all(cell.startswith((':material-check:', ':material-close:')) for cell in cells), row
        table[first] = [cell.startswith(':material-check:') for cell in cells]
    return table


def built(agent_class, env_id: str, **kwargs):
    """``agent_class`` built on ``env_id`` with ``kwargs`` (tiny buffers: only building is checked), or None if it
    refuses them."""
    from xagents.envs.creation import create_envs

    names = agent_class.parameter_names()
    small = {'buffer_max_size': 64, 'buffer_initial_size': 32, 'buffer_batch_size': 8}
    if agent_class.__name__ == 'ACER':
        small = {'buffer_max_size': 2, 'buffer_initial_size': 1}  # segments
    envs = create_envs(env_id)
    try:
        return agent_class(envs, quiet=True, **{key: value for key, value in small.items() if key in names}, **kwargs)
    except (TypeError, ValueError):
        envs.close()
        return None


def takes(agent_class, env_id: str, **kwargs) -> bool:
    agent = built(agent_class, env_id, **kwargs)
    if agent is not None:
        agent.envs.close()
    return agent is not None


@pytest.mark.parametrize('agent', ALGORITHMS)
def test_can_i_use_says_what_the_agent_takes(agent, tmp_path):
    import gymnasium as gym

    from xagents.registry import agent_class

    table, cls = can_i_use(agent), agent_class(agent)
    supports = cls.supported_action_spaces
    assert table['Discrete'] == [gym.spaces.Discrete in supports, True]
    assert table['Box'] == [gym.spaces.Box in supports, True]
    for space in ('MultiDiscrete', 'MultiBinary'):
        assert table[space] == [getattr(gym.spaces, space) in supports, False], space
    assert not any(table['Tuple'])
    sensors = 'Sensors-v0' if gym.spaces.Discrete in supports else 'SensorsBox-v0'  # Dict observations
    assert table['Dict'] == [False, takes(cls, f'xagents.tests.test_dict_observations:{sensors}')]
    continuous = 'Pendulum-v1' if gym.spaces.Box in supports else 'CartPole-v1'
    any_env = 'CartPole-v1' if gym.spaces.Discrete in supports else 'Pendulum-v1'
    assert table['reward normalisation (`normalize_rewards`)'] == [takes(cls, any_env, normalize_rewards=True)]
    assert table['gSDE (`use_sde`)'] == [takes(cls, continuous, use_sde=True)]
    assert table['prioritised replay, n-step returns'] == [takes(cls, any_env, prioritized=True, return_steps=2)]
    goal_env = 'BitFlipping-v0' if gym.spaces.Discrete in supports else 'PointReach-v0'
    assert table['hindsight experience replay (`her`, [goal envs](../guides/goals.md))'] == [
        takes(cls, goal_env, her=True)]
    assert table['Atari (Nature CNN)'] == [takes(cls, 'PongNoFrameskip-v4')]
    assert table['recurrent policies (`recurrent`)'] == [takes(cls, any_env, recurrent='lstm')]
    assert table['action masks (`action_masks`)'] == [cls.masks_actions and gym.spaces.Discrete in supports]
    plain = built(cls, any_env)
    try:
        plain.save(str(tmp_path / 'saved'), include_buffer=True)
        saves_buffer = True
    except ValueError:  # keeps no replay buffer to save
        saves_buffer = False
    finally:
        plain.envs.close()
    assert table['replay buffer in saves'] == [saves_buffer]


# ------------------------------------------------------------------------------------------- README
def test_the_readme_is_a_door():
    """A short README whose links all lead somewhere, and whose commands Getting started runs."""
    readme = (ROOT / 'README.md').read_text()
    assert len(readme.encode()) <= 15_000, f'README.md is {len(readme.encode()):,} bytes: move the detail to docs/'
    links = re.findall(r'\]\(([^)#\s]+)', readme)
    local = [link for link in links if '://' not in link]
    assert any(link.startswith('docs/') for link in local), 'the README links into the site'
    for link in local:
        assert (ROOT / link).exists(), f'README.md links to {link}, which does not exist'
    getting_started = (DOCS / 'getting-started.md').read_text()
    shared = [example for example in examples(ROOT / 'README.md')
              if example.argument.startswith('Getting started runs the same')]
    assert shared, 'the README\'s first run and script are no longer marked as the ones Getting started runs'
    for example in shared:
        assert example.code in getting_started, f'README.md:{example.line} is not what Getting started runs'


# ------------------------------------------------------------------------------------- the built site
@pytest.fixture(scope='module')
def site(tmp_path_factory) -> Path:
    """The site built as CI builds it: ``mkdocs build --strict`` (a warning or a broken link fails)."""
    pytest.importorskip('mkdocs', reason="the docs extra is not installed (pip install '.[docs]')")
    directory = tmp_path_factory.mktemp('site')
    result = subprocess.run([sys.executable, '-m', 'mkdocs', 'build', '--strict', '--site-dir', str(directory)],
                            cwd=ROOT, capture_output=True, text=True, timeout=600,
                            env=dict(os.environ, NO_MKDOCS_2_WARNING='1'))
    assert result.returncode == 0, result.stderr[-4000:]
    return directory


@pytest.fixture(scope='module')
def served(site):
    """The built site on an HTTP server at 127.0.0.1 (its base URL)."""
    handler = functools.partial(QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f'http://127.0.0.1:{server.server_address[1]}/'
    server.shutdown()
    server.server_close()


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


def test_the_search_index_holds_the_api(site):
    index = json.loads((site / 'search' / 'search_index.json').read_text())
    locations = {entry['location'] for entry in index['docs']}
    assert 'api/evaluation/#xagents.training.evaluation.evaluate' in locations
    assert 'api/agents/#xagents.agent.base.BaseAgent.fit' in locations
    assert any('Retrace' in entry['text'] for entry in index['docs'] if entry['location'].startswith('algorithms/acer/'))


def rendered(url: str) -> str:
    """The DOM of ``url`` after Chromium (headless, no network but the page's own server) has loaded it."""
    with tempfile.TemporaryDirectory() as profile:
        result = subprocess.run(
            [CHROMIUM, '--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
             '--disable-background-networking', '--disable-component-update', '--disable-sync',
             f'--user-data-dir={profile}', '--virtual-time-budget=5000', '--dump-dom', url],
            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and '</html>' in result.stdout, result.stderr[-2000:]
    return result.stdout


CHROMIUM = shutil.which('chromium') or shutil.which('chromium-browser')


@pytest.mark.skipif(CHROMIUM is None, reason='Chromium is not installed (Debian: apt-get install chromium)')
@pytest.mark.parametrize('path, heading, content', [
    ('', 'xagents', 'Getting started'),
    ('algorithms/ppo/', 'PPO: proximal policy optimisation', '<math'),
    ('api/agents/', 'Agents', 'Train until the mean reward reaches'),
])
def test_a_page_renders_with_navigation_search_and_its_heading(served, path, heading, content):
    dom = rendered(served + path)
    tabs = re.search(r'<nav class="md-tabs".*?</nav>', dom, re.S)
    assert tabs and all(tab in tabs.group() for tab in ('Getting started', 'Guides', 'Algorithms', 'API reference'))
    assert re.search(r'<input[^>]*class="md-search__input"', dom), 'no search box'
    title = re.search(r'<h1[^>]*>(.*?)</h1>', dom, re.S)
    assert title and re.sub(r'<a class="headerlink".*?</a>|<[^>]+>', '', title.group(1)).strip() == heading
    assert content in dom
