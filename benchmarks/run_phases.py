"""Where the time of a whole small training run goes; prints figures, asserts nothing::

    python benchmarks/run_phases.py [--agent ppo] [--env CartPole-v1] [--target 475] [--seeds 0 1 2]

Each seed is a fresh process training with the tuned settings to the target, as ``xagents train`` does. It
reports, in seconds: Python's start and the imports (TensorFlow's among them), building the agent and its envs,
the first update (tracing and compiling), the other updates, collection (acting, env stepping and readying the
batches: GAE, replay), the rest of ``fit`` (progress, episode records, stopping checks) and the exit after the last
step.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

PHASES = ('start and imports', 'build', 'first update (tracing)', 'other updates', 'collection', 'rest of fit', 'exit')


def phases(agent_name: str, env: str, target: float, seed: int, started: float) -> None:
    """In this process: train, timing each phase; print them as JSON (``exit`` is measured by the parent)."""
    from xagents.utils.console import load_keras

    load_keras()
    import keras

    from xagents.registry import agent_class

    imported = time.time()
    agent = agent_class(agent_name).from_env(env, seed=seed, quiet=True)
    built = time.time()
    timings = {'train_once': 0.0, 'updates': []}
    train_once, train_step = agent.train_once, agent.train_step

    def timed_train_step(*args, **kwargs):
        start = time.perf_counter()
        result = train_step(*args, **kwargs)
        keras.tree.map_structure(keras.ops.convert_to_numpy, result)  # wait for the compiled update to finish
        timings['updates'].append(time.perf_counter() - start)
        return result

    def timed_train_once():
        start = time.perf_counter()
        result = train_once()
        timings['train_once'] += time.perf_counter() - start
        return result

    # train_once collects (on-policy: through gathered() and collect(); off-policy: step by step) and then calls
    # train_step: collection is its time less the updates', so nothing is counted twice.
    agent.train_once, agent.train_step = timed_train_once, timed_train_step
    run = agent.fit(target_reward=target, max_steps=1_000_000)
    fitted = time.time()
    fit = fitted - built
    updates = timings['updates']
    print(json.dumps({
        'steps': run.steps, 'start and imports': imported - started, 'build': built - imported,
        'first update (tracing)': updates[0], 'other updates': sum(updates[1:]),
        'collection': timings['train_once'] - sum(updates), 'rest of fit': fit - timings['train_once'],
        'fit ended': fitted,
    }), flush=True)


def main() -> None:
    if sys.argv[1:2] == ['--child']:
        agent_name, env, target, seed, started = sys.argv[2:]
        phases(agent_name, env, float(target), int(seed), float(started))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--agent', default='ppo')
    parser.add_argument('--env', default='CartPole-v1')
    parser.add_argument('--target', type=float, default=475)
    parser.add_argument('--seeds', type=int, nargs='+', default=[0, 1, 2])
    args = parser.parse_args()
    rows = []
    for seed in args.seeds:
        started = time.time()
        result = subprocess.run([sys.executable, __file__, '--child', args.agent, args.env, str(args.target), str(seed),
                                 str(started)], capture_output=True, text=True)
        ended = time.time()
        if result.returncode != 0:
            raise SystemExit(result.stderr[-2000:])
        row = json.loads(result.stdout.strip().splitlines()[-1])
        row['exit'] = ended - row.pop('fit ended')
        row['whole'] = ended - started
        rows.append(row)
        print(f'seed {seed}: {row["steps"]:,} steps, {row["whole"]:.2f} s: '
              + ', '.join(f'{phase} {row[phase]:.2f}' for phase in PHASES), flush=True)
    print('medians: ' + ', '.join(f'{phase} {statistics.median(row[phase] for row in rows):.2f} s'
                                  for phase in (*PHASES, 'whole')))


if __name__ == '__main__':
    main()
