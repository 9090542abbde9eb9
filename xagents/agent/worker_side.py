"""WorkerSide: what an agent does with Ray workers: as a worker, act with the learner's weights on a random
stream of its own; as the learner, gather the workers' experience and count their steps and episodes as a local
run would (the pool itself is :mod:`xagents.training.distributed`)."""
from __future__ import annotations

import time
from typing import Sequence

import numpy as np

from xagents.training.distributed import Segment, join
from xagents.training.run import Episode
from xagents.utils.streams import ACTING, random_stream


class WorkerSide:
    """The worker-facing part of :class:`xagents.agent.base.BaseAgent`."""

    @property
    def weights_version(self) -> int:
        """A number that changes whenever the weights do."""
        return self._weights_version

    def worker_models(self) -> list:
        """The models whose weights workers receive: those the agent acts with."""
        return [model for forward in self.forwards for model in forward.models]

    def acting_weights(self) -> list[np.ndarray]:
        """The weights of :meth:`worker_models`, in order (what workers receive)."""
        return [weight for model in self.worker_models() for weight in model.get_weights()]

    def set_acting_weights(self, weights: list[np.ndarray]) -> None:
        """Take weights from :meth:`acting_weights` of an agent built alike."""
        offset = 0
        for model in self.worker_models():
            count = len(model.weights)
            model.set_weights(weights[offset:offset + count])
            offset += count
        self.on_weights_changed()

    def worker_settings(self) -> dict:
        """Settings a worker's agent takes instead of the learner's: it acts and never trains, nor starts workers."""
        return {'workers': None}

    def become_worker(self, index: int, count: int, first_step: int = 0) -> None:
        """Turn this agent into worker ``index`` of ``count`` in a fit starting at the learner's ``first_step``:
        a random stream of its own (in a first fit, worker 0's is a local run's), changed in place so that what
        holds the generator (noise) follows."""
        if index or first_step:
            stream = random_stream(self.seed, ACTING, index, *([first_step] if first_step else []))
            self.rng.bit_generator.state = stream.bit_generator.state

    def gathered(self):
        """This round's experience: the agent's :meth:`collect` here, or every worker's, acted with the same
        weights and joined along the env axis."""
        if not self.workers:
            return self.collect()
        segments = self.pool.gather(self)
        self.take_segments(segments, self.n_envs)
        return join([segment.experience for segment in segments])

    def take_segments(self, segments: Sequence[Segment], stride: int) -> None:
        """Count the env steps of workers' ``segments`` and record their episodes and statistics as a local
        run would: an episode that ended at vector step ``t`` ends ``(t + 1) * stride`` steps on."""
        now, start = time.perf_counter(), self.steps
        ended = sorted(((t, worker, score) for worker, segment in enumerate(segments) for score, t in segment.episodes),
                       key=lambda episode: episode[:2])  # stable: a worker's envs keep their order
        self.finished_episodes.extend(Episode(float(score), start + (t + 1) * stride, now) for t, _, score in ended)
        per_worker = self.envs.num_envs
        self.steps += sum(segment.vector_steps for segment in segments) * per_worker
        statistics = self.running_statistics()
        for segment in segments:
            for name, (mean, var, count) in segment.moments.items():
                if count:
                    statistics[name].update_from_moments(mean, var, count)

    def stop_workers(self) -> None:
        """Stop the workers of a fit (and the Ray instance it started)."""
        if self.pool is not None:
            self.pool, pool = None, self.pool
            pool.close()
