"""Training with Ray workers, against a real Ray cluster on loopback (``ray start --head``) and local Ray
instances; oracles are local runs of the same agents and the Ape-X/round structure, not the code under test."""
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

# Ray reads these when imported: without the first, a driver told 127.0.0.1 still talks to the machine's
# address; the second has every Ray process here (the test cluster, local instances) use the token.
os.environ['RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER'] = '0'
os.environ['RAY_AUTH_MODE'] = 'token'
pytest.importorskip('ray')

from xagents import A2C, ACER, DDPG, DQN, PPO, SAC, TD3, TRPO  # noqa: E402
from xagents.tests.test_env_faults import FAULTY_ENVS  # noqa: E402
from xagents.training.callbacks import Callback  # noqa: E402
from xagents.training.distributed import Worker, worker_arguments  # noqa: E402
from xagents.storage.history import read_history  # noqa: E402

LOOPBACK = {'127.0.0.1', '::ffff:127.0.0.1', '::1'}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(('127.0.0.1', 0))
        return probe.getsockname()[1]


@pytest.fixture(scope='module')
def cluster():
    """A Ray head of its own on 127.0.0.1, started as a user would (``ray start --head``, in the foreground so
    that stopping it stops only its processes); its address."""
    ray_command = os.path.join(os.path.dirname(sys.executable), 'ray')
    port = free_port()
    subprocess.run([ray_command, 'get-auth-token', '--generate'], check=True, capture_output=True, timeout=120)
    head = subprocess.Popen([ray_command, 'start', '--head', '--block', '--node-ip-address', '127.0.0.1',
                             '--port', str(port), '--num-cpus', '2', '--include-dashboard', 'false',
                             '--disable-usage-stats'], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while True:
        with socket.socket() as probe:
            if probe.connect_ex(('127.0.0.1', port)) == 0:
                break
        assert head.poll() is None and time.monotonic() < deadline, 'ray start --head did not come up'
        time.sleep(0.5)
    yield f'127.0.0.1:{port}'
    import ray

    ray.shutdown()
    head.terminate()
    head.wait(timeout=120)


def listeners(pids: set[int] | None = None) -> dict[str, set[str]]:
    """Listening TCP addresses by process name (``ss``), of ``pids`` only when given."""
    found: dict[str, set[str]] = {}
    for line in subprocess.run(['ss', '-Htlnp'], capture_output=True, text=True, check=True).stdout.splitlines():
        fields = line.split()
        for name, pid in re.findall(r'\("([^"]+)",pid=(\d+)', line):
            if pids is None or int(pid) in pids:
                found.setdefault(name, set()).add(fields[3].rsplit(':', 1)[0].strip('[]'))
    return found


def descendants(pid: int) -> set[int]:
    """``pid`` and every process below it, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir('/proc'):
        if entry.isdigit():
            try:
                with open(f'/proc/{entry}/stat') as stat:
                    parent = int(stat.read().rsplit(')', 1)[1].split()[1])
            except OSError:
                continue
            children.setdefault(parent, []).append(int(entry))
    found, todo = set(), [pid]
    while todo:
        found.add(todo[-1])
        todo.extend(children.get(todo.pop(), []))
    return found


class KillWorker(Callback):
    """SIGKILL worker ``index``'s process a few milliseconds into round ``at`` (while it collects), as a lost
    machine would end it."""

    def __init__(self, at: int, index: int = 1) -> None:
        self.at, self.index, self.rounds, self.killed_at = at, index, 0, None

    def on_round(self, run):
        self.rounds += 1
        if self.rounds == self.at:
            pid = run.agent.pool.pids()[self.index]
            threading.Timer(0.005, os.kill, (pid, signal.SIGKILL)).start()
            self.killed_at = run.agent.steps


@pytest.mark.parametrize('agent_class, env_id, settings', [
    (PPO, 'CartPole-v1', {}),
    (A2C, 'CartPole-v1', {}),
    (TRPO, 'CartPole-v1', {}),
    pytest.param(PPO, 'Pendulum-v1', {'normalize_observations': True, 'normalize_rewards': True, 'n_steps': 64},
                 marks=pytest.mark.backends),
    pytest.param(PPO, 'CartPoleNoVel-v1', {'recurrent': 'lstm', 'n_steps': 32, 'normalize_observations': True},
                 marks=pytest.mark.backends),
])
def test_one_worker_trains_exactly_as_a_local_run(agent_class, env_id, settings, cluster, tmp_path):
    """Worker 0 seeds its envs and draws its actions as a local run does, so a one-worker run on the cluster
    must repeat a local run's every episode at the same step and end with the same weights and running
    statistics: stale weights or statistics, a lost or doubled step, a misplaced episode or a wrongly
    joined rollout would all part them."""
    histories, weights, statistics = [], [], []
    for distributed in ({}, {'workers': 1, 'ray_address': cluster}):
        agent = agent_class.from_env(env_id, n_envs=4, seed=3, quiet=True, **settings, **distributed,
                                     history_checkpoint=str(tmp_path / f'{len(histories)}.parquet'))
        agent.fit(max_steps=4096)
        assert agent.steps >= 4096
        histories.append(agent.history.frame()[['episode_reward', 'step']].assign(total=agent.steps))
        weights.append([weight for model in agent.models.values() for weight in model.get_weights()])
        statistics.append([(s.mean, s.var, s.count) for s in agent.running_statistics().values()])
    assert len(histories[0]) >= 15
    assert histories[0].equals(histories[1])
    for local, distributed in zip(*weights):
        np.testing.assert_allclose(local, distributed, rtol=1e-5, atol=1e-6)
    assert len(statistics[0]) == (2 if settings else 0)  # (CartPoleNoVel-v1's preset normalises both)
    for local, distributed in zip(*statistics):
        for a, b in zip(local, distributed):
            np.testing.assert_allclose(a, b, rtol=1e-9)


def test_the_learner_merges_the_statistics_of_every_worker(cluster):
    """Two workers x 2 envs, one round of 64 steps: the learner's observation and return statistics have
    taken in all 256 observations and returns (a learner ignoring a worker's moments would count 128)."""
    agent = PPO.from_env('Pendulum-v1', seed=0, quiet=True, normalize_observations=True, normalize_rewards=True,
                         n_steps=64, n_envs=2, workers=2, ray_address=cluster)
    agent.fit(max_steps=256)
    assert agent.steps == 256
    for name, stats in agent.running_statistics().items():
        assert stats.count == pytest.approx(256, abs=1e-3), name


def test_a_killed_worker_is_restarted_and_the_run_reaches_its_target_with_a_whole_history(cluster, tmp_path, caplog):
    """SIGKILL one of two workers mid-run: Ray restarts it, the learner logs it and asks again, the run
    still solves CartPole, and the history counts each episode once, in step order, ending at the last step."""
    kill = KillWorker(at=10)
    agent = PPO.from_env('CartPole-v1', workers=2, n_envs=4, seed=0, ray_address=cluster, quiet=True,
                         history_checkpoint=str(tmp_path / 'history.parquet'))
    run = agent.fit(target_reward=475, max_steps=300_000, callbacks=[kill])
    assert kill.killed_at is not None
    assert 'Worker 1 was lost' in caplog.text
    assert run.mean_reward >= 475
    frame = agent.history.frame()
    steps = frame['step'].to_numpy()
    assert len(frame) == run.games
    assert np.all(np.diff(steps) >= 0) and steps[-1] <= agent.steps
    # A CartPole episode scores its length, so the recorded scores add up to the env steps taken, less the
    # episodes unfinished at the end (8 envs, at most 500 steps each) and those the killed worker lost (4):
    # a round lost or recorded twice would break the sum.
    assert agent.steps - 12 * 500 <= frame['episode_reward'].sum() <= agent.steps


def test_dqn_with_two_ape_x_actors_fills_each_actors_columns_and_solves_cartpole(cluster):
    """Ape-X's DQN (double, dueling, 3-step returns, prioritised at the actors' priorities) on two actors: they
    stream segments of update_every steps into their own buffer columns; every env step they take enters the
    buffer once; the greedy policy reaches 475 on 10 evaluation episodes. The actors' segments arrive in the
    order they finish, so a run is not repeatable: 20 runs of seed 0 reached 475 within 12,544-30,208 steps
    (seeds 1-10: 10,240-32,512), where plain DQN's 26 took 10,240-72,704 and one, under load, missed it in
    150,000."""
    agent = DQN.from_env('CartPole-v1', workers=2, seed=0, ray_address=cluster, quiet=True, double=True,
                         dueling=True, return_steps=3, prioritized=True)
    run = agent.fit(target_reward=475, max_steps=150_000, eval_frequency=2500, eval_episodes=10, stop_on='eval')
    assert run.eval_reward >= 475
    assert agent.buffer.steps == agent.steps
    assert set(agent.buffer.sample(512).indices % 2) == {0, 1}


@pytest.mark.parametrize('agent_class, env_id', [(ACER, 'CartPole-v1'), (DDPG, 'Pendulum-v1'), (TD3, 'Pendulum-v1'),
                                                   (SAC, 'Pendulum-v1')])
def test_every_other_agent_learns_from_two_workers(agent_class, env_id, cluster):
    """Each agent's own collection and worker settings, on two workers: the learner counts every env step its
    workers took, records their episodes, and (off-policy) stores every step in its buffer and updates."""
    agent = agent_class.from_env(env_id, workers=2, seed=0, ray_address=cluster, quiet=True)
    run = agent.fit(max_steps=3000)
    assert run.games >= 5 and agent.steps >= 3000
    assert agent.history.frame()['step'].is_monotonic_increasing
    if hasattr(agent, 'gradient_updates'):
        assert agent.buffer.steps == agent.steps
        assert int(agent.gradient_updates.numpy()) > 0


def q_and_next_value(agent, batch) -> tuple[np.ndarray, np.ndarray]:
    """``Q(s, a)`` of the first critic and the bootstrap value ``V(s')`` of a batch, written out per algorithm
    in NumPy from the agent's networks: double DQN, DDPG, discrete SAC (expectations over actions)."""
    observations, next_observations = agent.normalized(batch.observations), agent.normalized(batch.next_observations)
    rows = np.arange(len(batch.actions))

    def heads(model, inputs):
        outputs = model(inputs)
        return [np.asarray(output) for output in (outputs if isinstance(outputs, (list, tuple)) else [outputs])]

    if isinstance(agent, DQN):
        q = np.asarray(agent.model(observations))[rows, batch.actions]
        greedy = np.asarray(agent.model(next_observations)).argmax(-1)
        return q, np.asarray(agent.target_model(next_observations))[rows, greedy]
    if isinstance(agent, DDPG):
        q = heads(agent.critic, np.concatenate([observations, batch.actions], -1))[0][:, 0]
        next_actions = np.asarray(agent.target_actor(next_observations))
        return q, heads(agent.target_critic, np.concatenate([next_observations, next_actions], -1))[0][:, 0]
    alpha = np.exp(agent.log_alpha.numpy())
    q = heads(agent.critic, observations)[0][rows, batch.actions]
    logits = np.asarray(agent.actor(next_observations), np.float64)
    log_pi = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    next_q = np.minimum(*heads(agent.target_critic, next_observations))
    return q, (np.exp(log_pi) * (next_q - alpha * log_pi)).sum(-1)


@pytest.mark.parametrize('agent_class, env_id, settings', [
    (DQN, 'CartPole-v1', {'double': True}),
    (DDPG, 'Pendulum-v1', {}),
    (SAC, 'CartPole-v1', {'initial_alpha': 0.3}),
])
def test_apex_actors_send_the_priorities_of_their_transitions(agent_class, env_id, settings, cluster):
    """Ape-X (Horgan et al. 2018): a worker sends its transitions' estimates and each n-step window enters the
    learner's prioritised buffer at (|TD error| + epsilon) ** alpha under the worker's copy of every network,
    not at the running maximum. No update runs (the buffer never reaches buffer_initial_size), so the
    learner's networks are the workers' and the oracle computes the TD errors from them: 3-step windows
    within and across segments, cut by terminations (CartPole) and time limits (Pendulum). The learner's
    target networks are moved away from the online ones first, so a worker must have received them too."""
    agent = agent_class.from_env(env_id, workers=2, seed=0, ray_address=cluster, quiet=True, prioritized=True,
                                 return_steps=3, buffer_initial_size=5000, **settings)
    rng = np.random.default_rng(0)
    for target, _ in agent.target_pairs:
        target.set_weights([weight + rng.normal(0, 0.3, weight.shape) for weight in target.get_weights()])
    agent.on_weights_changed()
    agent.fit(max_steps=2000)
    buffer = agent.buffer
    assert int(agent.gradient_updates.numpy()) == 0 and buffer.steps == agent.steps >= 2000
    batch = buffer.sample(2000)
    q, next_values = q_and_next_value(agent, batch)
    td_errors = q - (batch.rewards + batch.discounts * next_values)
    stored = buffer.tree[batch.indices]
    ends = ~np.isclose(batch.discounts, agent.gamma ** 3)  # windows an episode end cut: terminated or timed out
    assert ends.any() and not ends.all()
    np.testing.assert_allclose(stored, (np.abs(td_errors) + buffer.epsilon) ** buffer.alpha, rtol=1e-4, atol=1e-5)
    assert len(np.unique(stored)) > 500 and stored.min() < 0.5 * buffer.max_priority ** buffer.alpha


@pytest.mark.parametrize('agent_class, env_id', [(DQN, 'CartPole-v1'), (SAC, 'Pendulum-v1'), (TD3, 'Pendulum-v1'),
                                                   (PPO, 'LunarLander-v3'), (TRPO, 'CartPole-v1'), (ACER, 'CartPole-v1')])
def test_a_worker_acts_with_the_learners_settings_and_keeps_only_what_acting_needs(agent_class, env_id):
    """A worker's agent is built in its process from the learner's settings (here in this one, without Ray):
    every setting must be the learner's but those of training alone (a worker keeping a small buffer must
    still act at random for the learner's start_steps, which defaults to the buffer's initial size)."""
    learner = agent_class.from_env(env_id, workers=2, seed=1, quiet=True)
    worker = Worker(agent_class, *worker_arguments(learner), 0, 2).agent
    training_only = {'n_envs', 'workers', 'buffer_max_size', 'buffer_initial_size', 'buffer_batch_size',
                     'mini_batches', 'minibatch_size'}
    ours, theirs = learner.config(), worker.config()
    assert {name for name in set(ours) | set(theirs) if ours.get(name) != theirs.get(name)} <= training_only
    assert theirs['n_envs'] * 2 == ours['n_envs']


def test_a_later_fit_seeds_its_workers_anew():
    """A first fit's worker 0 resets and acts as a local run; one starting at step 4096 must not replay it."""
    learner = PPO.from_env('CartPole-v1', workers=1, seed=5, quiet=True)
    first, later = (Worker(PPO, *worker_arguments(learner), 0, 1, step) for step in (0, 4096))
    local = PPO.from_env('CartPole-v1', seed=5, quiet=True)
    assert first.env_seed == 5
    assert first.agent.rng.bit_generator.state == local.rng.bit_generator.state
    assert later.env_seed != 5
    assert later.agent.rng.bit_generator.state != local.rng.bit_generator.state


def test_apex_actors_explore_less_in_turn_and_worker_0_as_a_local_run():
    """Ape-X (Horgan et al. 2018) gives actor i of N the rate 0.4 ** (1 + 7 i / (N - 1)): 0.4 times
    0.4 ** (7 i / (N - 1)), the factor workers apply to their own schedule."""
    agents = [DQN.from_env('CartPole-v1', quiet=True, seed=0) for _ in range(3)]
    for index, agent in enumerate(agents):
        agent.steps = 10 ** 9
        agent.become_worker(index, 3)
    end = agents[0].epsilon_end
    assert [agent.epsilon for agent in agents] == pytest.approx([end, end * 0.4 ** 3.5, end * 0.4 ** 7])


def test_a_local_ray_instance_listens_on_loopback_only_and_stops_with_the_fit():
    """Without an address the fit starts its own Ray instance: every socket its processes listen on is on
    127.0.0.1, and the instance is gone after the fit."""
    seen = {}

    class Listeners(Callback):
        def on_round(self, run):
            seen.update(listeners(descendants(os.getpid())))
            return False

    import ray

    ray.shutdown()  # a connection to the module's cluster would be joined, not started
    PPO.from_env('CartPole-v1', workers=2, n_envs=2, quiet=True).fit(max_steps=10_000, callbacks=[Listeners()])
    assert {'raylet', 'gcs_server'} <= set(seen)
    assert set().union(*seen.values()) <= LOOPBACK, seen
    assert not ray.is_initialized()


def test_the_cluster_started_for_the_tests_listens_on_loopback_only(cluster):
    ray_processes = {name: addresses for name, addresses in listeners().items()
                     if name in ('raylet', 'gcs_server') or name.startswith('ray::')}
    assert ray_processes
    assert set().union(*ray_processes.values()) <= LOOPBACK, ray_processes


def test_the_command_line_trains_on_workers_of_a_cluster(cluster, workdir, xagents_command):
    result = subprocess.run([*xagents_command, 'train', 'ppo', '--env', 'CartPole-v1', '--workers', '2',
                             '--n-envs', '4', '--ray-address', cluster, '--target-reward', '475', '--seed', '0',
                             '--history-checkpoint', 'history.parquet'],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    assert 'Reward achieved' in result.stdout + result.stderr
    assert os.path.exists('history.parquet')


@pytest.mark.parametrize('argv, message', [
    (['--ray-address', '127.0.0.1:1'], 'ray_address is where workers run: give the agent workers too'),
    (['--workers', '0'], 'expected workers >= 1, got 0'),
    (['--workers', '2', '--ray-address', f'127.0.0.1:{free_port()}'], 'cannot reach a Ray cluster at 127.0.0.1:'),
])
def test_bad_distributed_flags_are_one_line_errors(argv, message, workdir, xagents_command):
    result = subprocess.run([*xagents_command, 'train', 'ppo', '--env', 'CartPole-v1', '--max-steps', '100', *argv],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 2
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert os.listdir('.') == []


@pytest.fixture
def web_server():
    """A plain HTTP server on 127.0.0.1, no Ray: its address, and a list of the times it accepted a connection."""
    accepted = []

    class Server(ThreadingHTTPServer):
        def verify_request(self, request, client_address):
            accepted.append(time.monotonic())
            return True

    server = Server(('127.0.0.1', 0), BaseHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f'127.0.0.1:{server.server_address[1]}', accepted
    server.shutdown()
    server.server_close()


def train_on(address: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, '-m', 'xagents', 'train', 'ppo', '--env', 'CartPole-v1', '--workers',
                             '2', '--ray-address', address, '--max-steps', '100'],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_an_address_where_something_else_than_ray_answers_is_refused_in_one_line_within_30_s(web_server, workdir):
    """Ray's own retries would last many minutes: the attempt ends within 30 s of its first connection."""
    address, accepted = web_server
    command = train_on(address)
    _, err = command.communicate(timeout=300)
    ended = time.monotonic()
    assert command.returncode == 2, err[-2000:]
    assert accepted and ended - accepted[0] < 30
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f'xagents train ppo: error: cannot reach a Ray cluster at {address}: ')
    assert os.listdir('.') == []


def test_sigterm_while_reaching_a_cluster_stops_at_once_in_one_line(web_server, workdir):
    address, accepted = web_server
    command = train_on(address)
    deadline = time.monotonic() + 240
    while not accepted:
        assert command.poll() is None and time.monotonic() < deadline, command.communicate()[1][-2000:]
        time.sleep(0.1)
    time.sleep(3)  # well into the attempt
    command.send_signal(signal.SIGTERM)
    sent = time.monotonic()
    _, err = command.communicate(timeout=120)
    assert time.monotonic() - sent < 5
    assert command.returncode == 130 and err == 'xagents train ppo: interrupted\n', err[-2000:]


def test_an_env_that_raises_in_a_worker_stops_the_run_in_one_line_and_the_last_good_files_stay(
        cluster, workdir, xagents_command):
    """The worker's EnvError comes back as a local run's: one line naming the env, the call, the step and the
    worker, exit status 1, without restarting the worker (the bug would fail again)."""
    (workdir / 'faulty_envs.py').write_text(FAULTY_ENVS)
    started = time.monotonic()
    result = subprocess.run([*xagents_command, 'train', 'ppo', '--env', 'faulty_envs:Faulty-v0', '--env-kwargs',
                             'fault=raise', 'at=750', '--workers', '2', '--n-envs', '2', '--ray-address', cluster,
                             '--max-steps', '20000', '--reward-buffer-size', '10', '--seed', '0', '--quiet',
                             '--checkpoints', 'w.tf', '--history-checkpoint', 'h.parquet'],
                            capture_output=True, text=True, timeout=600, check=False)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 1 and len(lines) == 1 and 'Traceback' not in result.stdout, result.stderr[-3000:]
    assert re.fullmatch(r'xagents train ppo: error: faulty_envs:Faulty-v0 failed in step at env step [\d,]+: '
                        r'RuntimeError: simulator crashed \(worker [01]\); weights \(w.tf\) and history '
                        r'\(h.parquet\) of the last good point kept', lines[0]), lines[0]
    assert time.monotonic() - started < 120  # no minute of restarts
    history = read_history('h.parquet')
    assert len(history) > 10 and history['step'].iloc[-1] <= 2 * 2 * 750


def test_workers_without_ray_installed_is_a_one_line_error_naming_the_extra(workdir):
    """Ray made unimportable (as where it is not installed): exit 2 and the pip command."""
    script = ("import sys; sys.modules['ray'] = None; from xagents.app.cli import main; "
              "main(['train', 'ppo', '--env', 'CartPole-v1', '--workers', '2', '--max-steps', '100'])")
    result = subprocess.run([sys.executable, '-c', script], capture_output=True, text=True, timeout=300)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert lines == ['xagents train ppo: error: collecting with workers needs the ray package: pip install '
                     "'ray>=2.50'"]  # this xagents' extra, not the package index's older xagents


@pytest.mark.parametrize('agent_class, settings', [
    (PPO, {'n_steps': 8, 'mini_batches': 2}),
    pytest.param(DQN, {'buffer_initial_size': 40, 'buffer_batch_size': 8, 'update_every': 4, 'prioritized': True,
                       'return_steps': 2, 'epsilon_decay_steps': 100}, marks=pytest.mark.backends),
])
def test_workers_act_within_the_action_masks_and_the_learner_gets_them(agent_class, settings, cluster):
    """Workers read their envs' masks as a local run does: an env that raises on a forbidden action never does,
    and the learner's rollouts and buffer (Ape-X estimates included) carry the masks."""
    from xagents.envs.creation import create_envs

    envs = create_envs('xagents.tests.test_masks:MaskedCount-v0', n_envs=2, seed=0, env_kwargs={'strict': True})
    agent = agent_class(envs, seed=0, workers=2, **settings)
    gathered, masked = agent.gathered, []
    if agent_class is PPO:
        agent.gathered = lambda: masked.append(gathered()) or masked[-1]
    agent.fit(max_steps=200, quiet=True, ray_address=cluster)
    if agent_class is DQN:
        assert agent.buffer._masks is not None and not agent.buffer._masks.all()
    else:
        assert masked and all(rollout.action_masks is not None for rollout in masked)
