"""How close the off-policy updates come to this CPU's float32 throughput; prints figures, asserts nothing::

    python benchmarks/update_flops.py [--agents sac td3] [--env Hopper-v5]

For each agent, with its tuned settings on the env: the floating-point operations of one gradient step
(TensorFlow's profiler counts them in the traced ``train_step``; an actor update delayed to every
``policy_delay``-th step, as TD3's, counts once per ``policy_delay`` steps), the time one takes inside the
updates training runs (``gradient_steps`` of them per XLA-compiled graph call, their minibatches sampled),
and the rate that makes. Beside them, the rate of a chain of float32 products ``(256, k) @ (k, k)`` in one
graph call: about the most such an update can get from the machine.
"""
from __future__ import annotations

import argparse
import logging
import os
import statistics
import time

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')

from xagents.utils.console import load_keras  # noqa: E402

load_keras()

import tensorflow as tf  # noqa: E402
from tensorflow.python.profiler import model_analyzer, option_builder  # noqa: E402

from xagents.registry import agent_class  # noqa: E402

logger = logging.getLogger('benchmarks.update_flops')


def counted_flops(agent) -> float:
    """Floating-point operations in the graph of one ``train_step`` (not inside its conditional branches)."""
    batch = agent.buffer.sample(agent.buffer_batch_size)
    specs = [tf.TensorSpec(array.shape, tf.as_dtype(array.dtype)) for array in batch[:6]]
    graph = tf.function(agent.train_step).get_concrete_function(*specs).graph
    options = {**option_builder.ProfileOptionBuilder.float_operation(), 'output': 'none'}
    tf.get_logger().setLevel(logging.ERROR)  # the profiler's TF1 deprecation notes
    return model_analyzer.profile(graph, options=options).total_float_ops


def flops_per_step(name: str, env_id: str, seed: int) -> tuple[object, float]:
    """The agent (its buffer filled) and its floating-point operations per gradient step, on average."""
    agent = agent_class(name).from_env(env_id, seed=seed, quiet=True)
    agent.fit(max_steps=agent.buffer_initial_size)
    flops = counted_flops(agent)
    delay = getattr(agent, 'policy_delay', 1)
    if delay > 1:  # the delayed actor update sits in a conditional branch the count above leaves out
        every_step = agent_class(name).from_env(env_id, seed=seed, quiet=True, policy_delay=1)
        every_step.fit(max_steps=every_step.buffer_initial_size)
        flops += (counted_flops(every_step) - flops) / delay
        every_step.envs.close()
    return agent, flops


def seconds_per_step(agent, repeats: int) -> float:
    """Median seconds per gradient step of :meth:`update` (sampling included), after a compiling first call."""
    agent.update()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        agent.update()
        times.append((time.perf_counter() - start) / agent.gradient_steps)
    return statistics.median(times)


def matmul_rate(width: int, batch: int = 256, products: int = 200, dtype: str = 'float32') -> float:
    """FLOP/s of ``products`` chained ``(batch, width) @ (width, width)`` products of ``dtype`` in one graph call."""
    inputs = tf.cast(tf.random.normal((batch, width)), dtype)
    weights = tf.cast(tf.random.normal((width, width)) / width ** 0.5, dtype)

    @tf.function
    def chain(x, w):
        for _ in tf.range(products):
            x = tf.matmul(x, w)
        return x

    chain(inputs, weights)
    best = min(timed(lambda: chain(inputs, weights).numpy()) for _ in range(5))
    return 2 * batch * width * width * products / best


def timed(call) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--agents', nargs='+', default=['sac', 'td3'])
    parser.add_argument('--env', default='Hopper-v5')
    parser.add_argument('--repeats', type=int, default=10, help='timed updates per agent (default: 10)')
    parser.add_argument('--seed', type=int, default=0)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format='%(message)s')
    logging.getLogger('xagents').setLevel(logging.WARNING)
    for width in (256, 400):
        logger.info('float32 (256, %d) @ (%d, %d) chain: %.0f GFLOP/s (%d cores)',
                    width, width, width, matmul_rate(width) / 1e9, os.cpu_count())
    for name in args.agents:
        agent, flops = flops_per_step(name, args.env, args.seed)
        seconds = seconds_per_step(agent, args.repeats)
        logger.info('%-4s %s: %.0f MFLOP per gradient step, %.2f ms each: %.0f GFLOP/s',
                    name, args.env, flops / 1e6, seconds * 1e3, flops / seconds / 1e9)
        agent.envs.close()


if __name__ == '__main__':
    main()
