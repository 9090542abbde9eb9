"""Size and latency of exported policies: what ``agent.export`` writes, run by each format's own runtime.

Prints figures, asserts nothing::

    python benchmarks/export.py [--calls 1000]

Policies: PPO on CartPole-v1 (a 64-64 MLP, observations normalised) and PPO on PongNoFrameskip-v4 (the
Nature CNN on 84x84x4 uint8 frames), untrained (weights do not change the cost). Latency is the median
of ``--calls`` calls with one observation, after 50 warm-up calls, beside the agent's own ``predict``.
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')

import numpy as np  # noqa: E402

from xagents.ppo import PPO  # noqa: E402
from xagents.storage.export import FORMATS, load_exported  # noqa: E402


def median_latency(act, observation: np.ndarray, calls: int) -> float:
    """Median seconds of ``act(observation)`` over ``calls`` calls, after 50 warm-up calls."""
    for _ in range(50):
        act(observation)
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        act(observation)
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def size(path: str) -> int:
    if os.path.isfile(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(folder, name)) for folder, _, names in os.walk(path) for name in names)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--calls', type=int, default=1000)
    args = parser.parse_args()
    policies = {'PPO CartPole-v1 MLP': ('CartPole-v1', {'normalize_observations': True}),
                'PPO Pong CNN': ('PongNoFrameskip-v4', {'n_envs': 1})}
    print(f'{"policy":<22}{"format":<13}{"size":>12}{"latency (1 obs)":>18}')
    for name, (env_id, settings) in policies.items():
        agent = PPO.from_env(env_id, seed=0, quiet=True, **settings)
        observation = agent.envs.reset(seed=0)[0][:1]
        latency = median_latency(lambda batch: agent.predict(batch), observation, args.calls)
        print(f'{name:<22}{"predict":<13}{"":>12}{latency * 1e6:>15.1f} µs')
        with tempfile.TemporaryDirectory() as directory:
            for format in FORMATS:
                path = agent.export(os.path.join(directory, f'policy.{format}'), format)
                act = load_exported(path, format)
                latency = median_latency(act, observation, args.calls)
                print(f'{name:<22}{format:<13}{size(path):>12,}{latency * 1e6:>15.1f} µs')
        agent.envs.close()


if __name__ == '__main__':
    main()
