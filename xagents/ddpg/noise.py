"""Exploration noise for deterministic policies, specified as OpenAI Baselines' DDPG does.

``noise_type`` is a comma-separated list of ``normal_SIGMA`` (Gaussian action noise),
``ou_SIGMA`` (Ornstein-Uhlenbeck action noise) and ``adaptive-param_SIGMA`` (adaptive
parameter-space noise, Plappert et al. 2018, https://arxiv.org/abs/1706.01905), or ``none``,
e.g. ``adaptive-param_0.2,normal_0.1``. Actions here live in ``[-1, 1]``, so SIGMA is a
fraction of half the action range.
"""
from __future__ import annotations

import copy
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # parse_noise_type is read by the command line before TensorFlow loads
    from xagents.networks.models import NumpyForward

NOISE_KINDS = ('normal', 'ou', 'adaptive-param')


def parse_noise_type(noise_type: str) -> list[tuple[str, float]]:
    """``[(kind, sigma), ...]`` of a Baselines-style noise spec; ``none`` gives ``[]``.

    Raises:
        ValueError: an unknown kind, a missing or non-positive sigma, or a kind given twice.
    """
    parsed: list[tuple[str, float]] = []
    for part in (part.strip() for part in noise_type.split(',')):
        if part == 'none':
            continue
        kind, _, sigma = part.rpartition('_')
        if kind not in NOISE_KINDS:
            raise ValueError(f"expected noise types normal_SIGMA, ou_SIGMA, adaptive-param_SIGMA or none, "
                             f"comma-separated, got {part!r} in {noise_type!r}")
        try:
            value = float(sigma)
        except ValueError:
            raise ValueError(f'expected a number after {kind}_, got {sigma!r} in {noise_type!r}') from None
        if not 0 < value < float('inf'):
            raise ValueError(f'expected a finite {kind} sigma > 0, got {sigma!r} in {noise_type!r}')
        if kind in dict(parsed):
            raise ValueError(f'expected each noise type once, got {kind} twice in {noise_type!r}')
        parsed.append((kind, value))
    return parsed


class NormalActionNoise:
    """Independent Gaussian noise ``N(0, sigma^2)`` added to every action."""

    def __init__(self, sigma: float, rng: np.random.Generator) -> None:
        self.sigma, self.rng = sigma, rng

    def __call__(self, actions: np.ndarray, episode_starts: np.ndarray) -> np.ndarray:
        return actions + self.sigma * self.rng.standard_normal(actions.shape, dtype=np.float32)


class OrnsteinUhlenbeckActionNoise:
    """Temporally correlated noise ``dx = theta (mu - x) dt + sigma sqrt(dt) N(0, 1)``, per env.

    ``theta = 0.15`` and ``dt = 0.01`` as in Baselines; each env's process restarts from 0 when
    its episode does.
    """

    def __init__(self, sigma: float, rng: np.random.Generator, theta: float = 0.15, dt: float = 1e-2) -> None:
        self.sigma, self.rng, self.theta, self.dt = sigma, rng, theta, dt
        self.state: np.ndarray | None = None

    def __call__(self, actions: np.ndarray, episode_starts: np.ndarray) -> np.ndarray:
        if self.state is None:
            self.state = np.zeros_like(actions)
        self.state[episode_starts] = 0.0
        self.state += (-self.theta * self.state * self.dt
                       + self.sigma * np.sqrt(self.dt) * self.rng.standard_normal(actions.shape))
        return actions + self.state


class AdaptiveParamNoise:
    """Gaussian noise on the policy's weights, its scale adapted to a target action distance.

    The acting policy is a copy of the actor with ``N(0, stddev^2)`` added to every weight,
    drawn anew when an episode starts. Every adaptation, a fresh perturbation is measured on
    replayed observations: ``d = sqrt(mean((pi(s) - pi_perturbed(s))^2))``; ``stddev`` shrinks by
    ``coefficient`` if ``d`` exceeds ``sigma`` and grows by it otherwise (Baselines:
    ``AdaptiveParamNoiseSpec(initial_stddev=sigma, desired_action_stddev=sigma)``).
    """

    def __init__(self, sigma: float, rng: np.random.Generator, coefficient: float = 1.01) -> None:
        self.desired_distance, self.stddev, self.rng, self.coefficient = sigma, sigma, rng, coefficient
        self.distance = 0.0

    def perturb(self, forward: NumpyForward) -> NumpyForward:
        """A copy of ``forward`` (its current weights) with Gaussian noise on every weight."""
        def noisy(layers):
            return [(kernel + self.stddev * self.rng.standard_normal(kernel.shape, dtype=np.float32),
                     bias + self.stddev * self.rng.standard_normal(bias.shape, dtype=np.float32), activation)
                    for kernel, bias, activation in layers]

        perturbed = copy.copy(forward)
        perturbed.trunk = noisy(forward.trunk)
        perturbed.branches = [noisy(branch) for branch in forward.branches]
        return perturbed

    def adapt(self, forward: NumpyForward, observations: np.ndarray) -> None:
        """Measure a fresh perturbation's action distance on ``observations`` and rescale."""
        clean = forward(observations)[0]
        noisy = self.perturb(forward)(observations)[0]
        self.distance = float(np.sqrt(np.mean((clean - noisy) ** 2)))
        if self.distance > self.desired_distance:
            self.stddev /= self.coefficient
        else:
            self.stddev *= self.coefficient
