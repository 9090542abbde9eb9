"""Trust region policy optimisation (Schulman et al. 2015, arXiv 1502.05477), with GAE."""
from __future__ import annotations

import gymnasium as gym
import keras
from keras import ops

from xagents import backend
from xagents.agent.on_policy import OnPolicy
from xagents.maths.distributions import DiagGaussian
from xagents.envs.masks import masked_logits
from xagents.networks.models import Output
from xagents.maths.optimization import assign_flat, conjugate_gradient, flat_concat, minibatch_epochs, standardized


class TRPO(OnPolicy):
    """TRPO: a natural-gradient policy step kept inside a KL trust region; a separate critic.

    Schulman et al. 2015, https://arxiv.org/abs/1502.05477.

    Each rollout (GAE advantages, Schulman et al. 2016, arXiv 1506.02438) gives one policy step:

    - surrogate ``L(theta) = E[pi_theta(a|s) / pi_old(a|s) * A]`` and its gradient ``g``;
    - search direction ``s = F^-1 g`` by conjugate gradient on Fisher-vector products
      ``F v = grad((grad KL(pi_old || pi_theta)) . v) + cg_damping * v`` (appendix C);
    - full step ``sqrt(2 max_kl / s.F s) * s``, the largest the quadratic KL model allows, shrunk
      by ``line_search_shrink`` until the mean KL is at most ``max_kl`` and ``L`` improves; if no
      step of ``line_search_steps`` qualifies, the policy stays as it was.

    The critic regresses the GAE returns with Adam for ``critic_iterations`` passes of
    ``mini_batches`` minibatches. The whole update, conjugate gradient included, is one graph call.
    """

    model_roles = ('actor', 'critic')

    def __init__(
        self,
        envs: gym.vector.VectorEnv,
        actor_model: str | keras.Model | None = None,
        critic_model: str | keras.Model | None = None,
        *,
        n_steps: int = 256,
        lam: float = 0.95,
        lr: float = 1e-3,
        max_kl: float = 0.01,
        cg_iterations: int = 15,
        cg_damping: float = 0.1,
        cg_residual_tolerance: float = 1e-10,
        line_search_steps: int = 10,
        line_search_shrink: float = 0.8,
        critic_iterations: int = 10,
        mini_batches: int = 16,
        normalize_advantages: bool = True,
        **kwargs,
    ) -> None:
        """Build the actor, the critic and the critic's optimizer.

        Args:
            actor_model: Policy model: a .cfg file, or from Python a Keras model (default: packaged cfg).
            critic_model: Value model: a .cfg file, or from Python a Keras model (default: packaged cfg).
            n_steps: Steps per env in each rollout (over the 8 envs of the generic defaults, SB3-contrib's 2,048 a
                rollout).
            lam: GAE lambda.
            lr: Learning rate of the critic's Adam optimizer.
            max_kl: Trust-region bound on the mean KL(old policy || new policy) of a step.
            cg_iterations: Conjugate gradient iterations solving F s = g.
            cg_damping: Added to the Fisher matrix's diagonal (F + damping I) for stability.
            cg_residual_tolerance: Stop conjugate gradient once the squared residual is below this.
            line_search_steps: Backtracking line search tries at most this many step sizes.
            line_search_shrink: Each line search try multiplies the step by this (in (0, 1)).
            critic_iterations: Passes of critic regression over each rollout.
            mini_batches: Critic minibatches per pass (must divide n_steps * n_envs; over 8 envs, SB3-contrib's
                minibatches of 128).
            normalize_advantages: Normalise the rollout's advantages before the policy step.
        """
        super().__init__(envs, n_steps=n_steps, lam=lam, lr=lr, **kwargs)
        if self.use_sde:
            raise ValueError('TRPO explores with a state-independent std; use_sde is for PPO, A2C, SAC, TQC and CrossQ')
        batch = n_steps * self.n_envs
        if batch % mini_batches:
            raise ValueError(
                f'expected mini_batches to divide n_steps * n_envs = {batch}, got {mini_batches}'
            )
        self.max_kl, self.cg_iterations, self.cg_damping = max_kl, cg_iterations, cg_damping
        self.cg_residual_tolerance = cg_residual_tolerance
        self.line_search_steps, self.line_search_shrink = line_search_steps, line_search_shrink
        self.critic_iterations, self.mini_batches = critic_iterations, mini_batches
        self.normalize_advantages = normalize_advantages
        self.minibatch_size = batch // mini_batches
        self.gaussian = isinstance(self.distribution, DiagGaussian)
        self.actor = self.with_log_std(
            self.build('actor', actor_model, [Output('policy', self.distribution.output_units())])
        )
        self.critic = self.build('critic', critic_model, [Output('value', 1)])
        self.critic_optimizer = self.make_optimizer('critic')
        self.act_with(self.actor, self.critic)

    # ---------------------------------------------------------------------------- updating
    def surrogate_and_kl(self, observations, actions, old_params, old_log_std, old_log_probs, advantages,
                         action_masks=None):
        """Surrogate ``E[r A]`` and mean ``KL(old || current)`` of the actor's current weights (``old_params``
        already masked, the current ones masked by ``action_masks`` here)."""
        params = masked_logits(self.actor(observations), action_masks)
        log_probs, _ = self.log_prob_entropy(params, actions)
        surrogate = ops.mean(ops.exp(log_probs - old_log_probs) * advantages)
        if self.gaussian:
            kl = self.distribution.kl(old_params, old_log_std, params, self.actor.log_std)
        else:
            kl = self.distribution.kl(old_params, params)
        return surrogate, ops.mean(kl)

    @backend.compiled_method
    def train_step(self, observations, actions, log_probs, advantages, returns, action_masks=None) -> dict:
        if self.normalize_advantages:
            advantages = standardized(advantages)
        variables = self.actor.trainable_variables
        old_theta = flat_concat(variables)
        old_params = masked_logits(self.actor(observations), action_masks)
        old_log_std = ops.copy(self.actor.log_std) if self.gaussian else None
        old_log_probs, _ = self.log_prob_entropy(old_params, actions)

        def surrogate_and_kl():
            return self.surrogate_and_kl(observations, actions, old_params, old_log_std,
                                         old_log_probs, advantages, action_masks)

        (surrogate, _), gradient = backend.value_and_grad(surrogate_and_kl, variables)
        gradient = flat_concat(gradient)

        def fisher_vector_product(vector):
            # The Hessian of KL(old || theta) at theta = old is the Fisher information matrix.
            return backend.hvp(lambda: surrogate_and_kl()[1], variables, vector) + self.cg_damping * vector

        direction = conjugate_gradient(fisher_vector_product, gradient, self.cg_iterations,
                                       self.cg_residual_tolerance)
        # 0.5 s.F s (lambda^2) = max_kl: the largest step the quadratic KL model allows.
        full_step = ops.sqrt(2 * self.max_kl / (ops.sum(direction * fisher_vector_product(direction)) + 1e-12)
                             ) * direction

        def line_search(i, fraction, accepted, kl, new_surrogate):
            """Try ``fraction`` of the full step; shrink it unless the KL holds and the surrogate improves."""
            assign_flat(variables, old_theta + fraction * full_step)
            new_surrogate, kl = surrogate_and_kl()
            accepted = ops.logical_and(kl <= self.max_kl, new_surrogate > surrogate)
            return i + 1, ops.where(accepted, fraction, fraction * self.line_search_shrink), accepted, kl, new_surrogate

        _, fraction, accepted, kl, new_surrogate = backend.while_loop(
            lambda i, fraction, accepted, kl, new_surrogate: ops.logical_and(i < self.line_search_steps,
                                                                               ops.logical_not(accepted)),
            line_search, (ops.convert_to_tensor(0), ops.convert_to_tensor(1.0), ops.convert_to_tensor(False),
                          ops.convert_to_tensor(0.0), surrogate))
        # No fraction accepted: the policy stays where it was.
        fraction, kl = ops.where(accepted, fraction, 0.0), ops.where(accepted, kl, 0.0)
        new_surrogate = ops.where(accepted, new_surrogate, surrogate)
        assign_flat(variables, old_theta + fraction * full_step)

        critic_variables = self.critic.trainable_variables

        def critic_minibatch(indices):
            def value_loss():
                values = self.critic(ops.take(observations, indices, axis=0))[:, 0]
                loss = ops.mean((ops.take(returns, indices, axis=0) - values) ** 2)
                return loss, loss

            (_, loss), gradients = backend.value_and_grad(value_loss, critic_variables)
            self.critic_optimizer.apply(gradients, critic_variables)
            return {'value_loss': loss}, ops.convert_to_tensor(False)

        critic = minibatch_epochs(self.critic_iterations, self.minibatch_size * self.mini_batches, self.minibatch_size,
                                  critic_minibatch, {'value_loss': ops.convert_to_tensor(0.0)}, self.graph_random)
        return {'surrogate_gain': new_surrogate - surrogate, 'kl': kl, 'step_fraction': fraction,
                'value_loss': critic['value_loss']}
