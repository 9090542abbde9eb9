"""Memory and speed of the replay buffers on Atari-sized observations (84x84x4 uint8 stacks).

Prints figures, asserts nothing::

    python benchmarks/buffer_memory.py [--capacity 100000] [--n-envs 8] [--segments 2500]
"""
from __future__ import annotations

import argparse
import time

import gymnasium as gym
import numpy as np

from xagents.replay.buffers import ReplayBuffer
from xagents.replay.prioritized import PrioritizedReplayBuffer
from xagents.replay.segments import SegmentBuffer

OBSERVATION_SPACE = gym.spaces.Box(0, 255, (84, 84, 4), np.uint8)
ACTION_SPACE = gym.spaces.Discrete(6)
FRAME_BYTES = 84 * 84


def rss_mib() -> float:
    """Resident set size of this process, from /proc/self/status."""
    with open('/proc/self/status') as status:
        for line in status:
            if line.startswith('VmRSS:'):
                return int(line.split()[1]) / 1024
    raise RuntimeError('no VmRSS in /proc/self/status')


def make_buffer(cls, capacity: int, n_envs: int, **kwargs):
    return cls(capacity, n_envs, OBSERVATION_SPACE, ACTION_SPACE, seed=0, frame_stack_axis=-1,
               **kwargs)


class FakeAtari:
    """Random frames shifted through 84x84x4 stacks, episodes of random length (mean 1000)."""

    def __init__(self, n_envs: int, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)
        self.pool = self.rng.integers(0, 256, (64, n_envs, 84, 84), np.uint8)
        self.stacks = np.repeat(self.pool[0][..., None], 4, axis=-1)
        self.n_envs, self.t = n_envs, 0

    def step(self):
        self.t += 1
        next_stacks = np.concatenate([self.stacks[..., 1:], self.pool[self.t % 64][..., None]], -1)
        ended = self.rng.random(self.n_envs) < 1e-3
        terminated = ended & (self.rng.random(self.n_envs) < 0.5)
        args = (self.stacks, self.rng.integers(0, 6, self.n_envs), np.ones(self.n_envs, np.float32),
                next_stacks, terminated, ended & ~terminated)
        reset = np.repeat(self.pool[(self.t + 7) % 64][..., None], 4, axis=-1)
        self.stacks = np.where(ended[:, None, None, None], reset, next_stacks)
        return args


def fill(buffer, env: FakeAtari, transitions: int) -> float:
    """Add vector steps until ``transitions`` are added; return the seconds spent in ``add``."""
    spent = 0.0
    for _ in range(transitions // env.n_envs):
        args = env.step()
        start = time.perf_counter()
        buffer.add(*args)
        spent += time.perf_counter() - start
    return spent


def sample_rate(buffer, batch_size: int, seconds: float = 1.0) -> float:
    calls, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        buffer.sample(batch_size)
        calls += 1
    return calls * batch_size / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--capacity', type=int, default=100_000)
    parser.add_argument('--n-envs', type=int, default=8)
    parser.add_argument('--segments', type=int, default=2500, help="ACER's buffer_size (its Atari preset)")
    args = parser.parse_args()

    print('bytes per transition, 84x84x4 uint8 observations, frame storage '
          f'(one 84x84 frame = {FRAME_BYTES} B, target <= {1.1 * FRAME_BYTES:.0f} B):')
    for cls in (ReplayBuffer, PrioritizedReplayBuffer):
        for capacity in (args.capacity, 1_000_000):
            buffer = make_buffer(cls, capacity, args.n_envs)  # np.zeros: pages untouched yet
            print(f'  {cls.__name__:24s} capacity {capacity:>9,}: '
                  f'{buffer.bytes_per_transition:8.1f} B '
                  f'({buffer.bytes_per_transition / FRAME_BYTES:.4f} frames)')
            del buffer
    whole = ReplayBuffer(args.capacity, args.n_envs, OBSERVATION_SPACE, ACTION_SPACE)
    print(f'  whole stacks, for comparison:                 {whole.bytes_per_transition:8.1f} B')
    del whole

    for cls, kwargs in ((ReplayBuffer, {}), (PrioritizedReplayBuffer, {'n_steps': 3})):
        env = FakeAtari(args.n_envs)
        before = rss_mib()
        buffer = make_buffer(cls, args.capacity, args.n_envs, **kwargs)
        allocated = rss_mib()
        seconds = fill(buffer, env, args.capacity)
        filled = rss_mib()
        name = f'{cls.__name__} {kwargs or ""}'.strip()
        print(f'\n{name}, capacity {args.capacity:,}, {args.n_envs} envs:')
        print(f'  RSS growth: {allocated - before:7.1f} MiB after allocation, '
              f'{filled - before:7.1f} MiB filled ({len(buffer):,} transitions stored; '
              f'nbytes {buffer.nbytes / 2 ** 20:.1f} MiB)')
        print(f'  add:    {args.capacity / seconds:>10,.0f} transitions/s '
              f'({seconds / (args.capacity // args.n_envs) * 1e6:.1f} us per vector step)')
        for batch_size in (32, 256):
            rate = sample_rate(buffer, batch_size)
            print(f'  sample: {rate:>10,.0f} transitions/s at batch {batch_size} '
                  f'({batch_size / rate * 1e6:.0f} us per batch)')
        del buffer

    print(f"\nACER's segment buffer, {args.segments:,} segments of 20 steps x {args.n_envs} envs "
          f'({args.segments * 20:,} frames per env, as Baselines):')
    for axis, label in ((-1, 'frames'), (None, 'whole stacks')):
        buffer = SegmentBuffer(args.segments, 20, args.n_envs, OBSERVATION_SPACE, ACTION_SPACE, frame_stack_axis=axis)
        steps = args.segments * 20 * args.n_envs
        print(f'  {label:12s}: {buffer.nbytes / 2 ** 30:6.2f} GiB, {buffer.nbytes / steps:8.1f} B per env step')
        del buffer


if __name__ == '__main__':
    main()
