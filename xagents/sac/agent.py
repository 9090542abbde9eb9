"""Soft actor-critic (Haarnoja et al. 2018, https://arxiv.org/abs/1812.05905), Box and Discrete actions."""
from __future__ import annotations

import math

import gymnasium as gym
import keras
import numpy as np
from keras import ops

from xagents import backend
from xagents.agent.off_policy import OffPolicy
from xagents.maths.distributions import Categorical, StateDependentNoise
from xagents.envs.masks import masked_logits, masked_logits_np
from xagents.networks.models import Output
from xagents.maths.multi_distributions import argmax

LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0  # as Stable-Baselines3 and Spinning Up clamp them
SDE_MEAN_BOUND = 2.0  # gSDE's means are clipped to [-2, 2] before tanh, as Stable-Baselines3 does


class LogAlpha(keras.Model):
    """The log of SAC's entropy weight, as a model so it is checkpointed and optimised like one."""

    def __init__(self, alpha: float) -> None:
        super().__init__(name='alpha')
        self.log_alpha = self.add_weight(shape=(), initializer=keras.initializers.Constant(math.log(alpha)),
                                         name='log_alpha')


class SAC(OffPolicy):
    """SAC with twin soft Q-functions, Polyak targets and automatic entropy tuning.

    Box actions (Haarnoja et al. 2018): a tanh-squashed Gaussian policy, log-probabilities
    corrected for the squashing, ``a ~ pi(.|s)`` sampled by reparameterisation:
        y = R + discount * (min_i Q_targ_i(s', a') - alpha log pi(a'|s')),  a' ~ pi(.|s')
        critic loss = 1/2 sum_i E[w (Q_i(s, a) - y)^2]
        actor loss = E[alpha log pi(a~|s) - min_i Q_i(s, a~)]
        alpha loss = -E[log alpha * (log pi(a~|s) + target_entropy)]
    With ``use_sde`` (generalised state-dependent exploration, Raffin et al. 2021,
    https://arxiv.org/abs/2005.05719) the noise is a function of the state rather than fresh at each
    step: ``u = mean(s) + f(s) E`` where ``f(s)`` are the actor's last hidden activations
    and ``E ~ N(0, sigma^2)`` a ``(features, actions)`` matrix of learned ``log sigma``, drawn anew at
    the start of each collection and every ``sde_sample_freq`` steps within it when acting (as
    Stable-Baselines3's ``collect_rollouts``), and once per gradient step when learning; so
    ``u ~ N(mean(s), f(s)^2 sigma^2)`` per action dimension. The actor loss trains ``f(s)`` through
    the noise as well as through the mean, as Stable-Baselines3's SAC does (``learn_features``), so
    the policy learns in which states to explore.
    Discrete actions (Christodoulou 2019, https://arxiv.org/abs/1910.07207): the policy is a
    softmax and every expectation over actions is computed exactly:
        y = R + discount * sum_a' pi(a'|s') (min_i Q_targ_i(s', a') - alpha log pi(a'|s'))
        actor loss = E[sum_a pi(a|s) (alpha log pi(a|s) - min_i Q_i(s, a))]
        alpha loss = -E[log alpha * (sum_a pi(a|s) log pi(a|s) + target_entropy)]
    ``R`` and ``discount`` come from the buffer (n-step return, 0 after a termination).
    With action masks the softmax runs over the allowed actions (masked logits), in acting and in every
    expectation (the next state's mask in the target); the entropy aimed at in a state with ``k`` allowed
    actions is ``target_entropy * log(k) / log(n)`` (0.89 log k by default), which its policy can reach.
    """

    masks_actions = True
    dense_variant = '-256'  # SB3's 256-256 networks by default; presets of small tasks name the 64-64 ones

    model_roles = ('actor', 'critic', 'target_critic', 'alpha')
    metric_names = ('critic_loss', 'actor_loss', 'alpha_loss', 'alpha', 'entropy')

    @classmethod
    def defaults_before(cls, saved_by: tuple[int, ...], settings: dict, envs: gym.vector.VectorEnv) -> dict:
        """Discrete SAC aimed at 0.98 log(n) before xagents 2.3: a save from then goes on towards it."""
        space = envs.single_action_space
        if saved_by < (2, 3) and settings.get('target_entropy') is None and isinstance(space, gym.spaces.Discrete):
            return {'target_entropy': 0.98 * math.log(int(space.n))}
        return {}

    def __init__(
        self,
        envs: gym.vector.VectorEnv,
        actor_model: str | keras.Model | None = None,
        critic_model: str | keras.Model | None = None,
        *,
        lr: float = 3e-4,
        buffer_initial_size: int = 1000,
        buffer_batch_size: int = 256,
        update_every: int = 50,
        gradient_steps: int = 50,
        tau: float = 0.005,
        alpha: float | None = None,
        initial_alpha: float = 1.0,
        target_entropy: float | None = None,
        use_sde: bool = False,
        sde_sample_freq: int | None = None,
        log_std_init: float = -3.0,
        use_expln: bool = False,
        **kwargs,
    ) -> None:
        """
        Args:
            actor_model: Policy: a .cfg file, or from Python a Keras model (default: packaged cfg, 256-256 as
                SB3's; ``ann-actor.cfg`` is 64-64).
            critic_model: Twin Q-functions, one model with two heads (default: packaged cfg, each 256-256 as SB3's;
                ``ann-critic.cfg`` is 64-64).
            lr: Learning rate of the actor, the critics and alpha.
            buffer_initial_size: Transitions gathered with uniform random actions before learning starts.
            buffer_batch_size: Transitions per gradient step.
            update_every: Env steps (summed over envs, a multiple of n_envs) between updates.
            gradient_steps: Gradient steps per update, all run in one compiled call.
            tau: Polyak coefficient of the target critics.
            alpha: A fixed entropy weight; default: tuned automatically towards target_entropy.
            initial_alpha: Starting entropy weight when it is tuned.
            target_entropy: Entropy aimed at when tuning alpha; default -dim(A) for Box actions and
                0.89 log(n) for n discrete actions (CleanRL's, since xagents 2.3; with the paper's 0.98 log(n)
                CartPole's policy reached 475 and fell back on most seeds, and a save from before keeps it).
            use_sde: Explore Box actions with generalised state-dependent noise (gSDE, Raffin et al.
                2021); a Keras actor then returns [means, features].
            sde_sample_freq: Env steps (per env) between new gSDE noise within a collection (noise is
                always new when one starts, after each update); default: only then, as Stable-Baselines3's -1.
            log_std_init: Initial log sigma of gSDE's noise.
            use_expln: gSDE's sigma is exp(log sigma) up to 1 and grows as log1p(log sigma) + 1 beyond, not
                exponentially (Stable-Baselines3's use_expln).
        """
        super().__init__(envs, lr=lr, buffer_initial_size=buffer_initial_size,
                         buffer_batch_size=buffer_batch_size, update_every=update_every,
                         gradient_steps=gradient_steps, tau=tau, **kwargs)
        self.auto_alpha = alpha is None
        if target_entropy is None:
            target_entropy = 0.89 * math.log(self.n_actions) if self.discrete else -float(
                np.prod(self.action_low.shape))
        self.target_entropy = target_entropy
        if use_sde and self.discrete:
            raise ValueError('use_sde explores Box actions; this env\'s actions are discrete')
        if use_expln and not use_sde:
            raise ValueError('use_expln shapes the noise of use_sde: give use_sde too')
        self.use_sde, self.sde_sample_freq, self.log_std_init = use_sde, sde_sample_freq, log_std_init
        self.use_expln = use_expln
        action_dim = 0 if self.discrete else int(np.prod(self.action_low.shape))
        if self.discrete:
            self.categorical = Categorical(envs.single_action_space)
            actor_units = q_units = self.n_actions
        else:
            actor_units, q_units = (1 if use_sde else 2) * action_dim, 1
        self.actor = self.build('actor', actor_model, [Output('policy', actor_units)], features=use_sde)
        if use_sde:  # (build checked the outputs: means, then features)
            features = self.actor.outputs[-1].shape[-1]
            self.actor.sde_log_std = self.actor.add_weight(
                shape=(features, action_dim), initializer=keras.initializers.Constant(log_std_init),
                name='sde_log_std')
        self.sde = StateDependentNoise(sde_sample_freq, use_expln) if use_sde else None
        self.critic = self.build_critics(critic_model, q_units)
        # Without target networks (CrossQ) the target bootstraps from the critics themselves.
        self.target_critic = (self.build_target('target_critic', self.critic) if 'target_critic' in self.model_roles
                              else self.critic)
        self.models['alpha'] = self.alpha_model = LogAlpha(initial_alpha if self.auto_alpha else alpha)
        self.log_alpha = self.alpha_model.log_alpha
        self.actor_optimizer = self.make_optimizer('actor')
        self.critic_optimizer = self.make_optimizer('critic')
        self.alpha_optimizer = self.make_optimizer('alpha') if self.auto_alpha else None
        self.actor_forward = self.acting(self.actor)

    def build_critics(self, critic_model, q_units: int) -> keras.Model:
        """The twin Q-functions, one model with a head (and tower) each."""
        return self.build_critic('critic', critic_model, [Output('q1', q_units), Output('q2', q_units)])

    # ------------------------------------------------------------------------ acting
    def policy(self, observations: np.ndarray, deterministic: bool,
               action_masks: np.ndarray | None = None) -> np.ndarray:
        if self.use_sde:
            return self.sde_policy(observations, deterministic)
        outputs = self.actor_forward(observations)[0]
        if self.discrete:
            return self.categorical.sample_np(masked_logits_np(outputs, action_masks), self.rng, deterministic)[0]
        dim = outputs.shape[-1] // 2
        mean, log_std = outputs[:, :dim], outputs[:, dim:]
        if deterministic:
            return np.tanh(mean)
        std = np.exp(np.clip(log_std, LOG_STD_MIN, LOG_STD_MAX))
        return np.tanh(mean + std * self.rng.standard_normal(mean.shape, dtype=np.float32))

    def sde_policy(self, observations: np.ndarray, deterministic: bool) -> np.ndarray:
        """tanh(mean + f(s) E) with each env's noise matrix E (tanh(mean) when ``deterministic``)."""
        mean, features = self.actor_forward(observations)
        mean = np.clip(mean, -SDE_MEAN_BOUND, SDE_MEAN_BOUND)
        if deterministic:
            return np.tanh(mean)
        return np.tanh(mean + self.sde.noise(features, self.actor.sde_log_std.numpy(), self.rng))

    def greedy_graph(self, observations, action_masks=None):
        outputs = self.actor(observations)
        if self.discrete:
            return argmax(masked_logits(outputs, action_masks))
        if self.use_sde:
            return ops.tanh(ops.clip(outputs[0], -SDE_MEAN_BOUND, SDE_MEAN_BOUND))
        return ops.tanh(ops.split(outputs, 2, axis=-1)[0])

    def explore(self, observations: np.ndarray, action_masks: np.ndarray | None = None) -> np.ndarray:
        return self.policy(observations, False, action_masks)

    # ---------------------------------------------------------------------- learning
    def squashed_gaussian(self, observations, sde_noise=None, training: bool = False) -> tuple:
        """Reparameterised actions ``tanh(u)`` in ``[-1, 1]`` and their log-probabilities ``(batch,)``.

        log pi(a|s) = log N(u; mean, std) - sum log(1 - tanh(u)^2), the second term written as
        2 (log 2 - u - softplus(-2u)) for numerical stability (Spinning Up's form). ``training`` runs the actor in
        training mode (its batch renormalisation, in CrossQ, then learns its statistics). With gSDE,
        ``u = mean + f(s) E`` where ``E = sigma * sde_noise`` (the step's standard normal draw, so that
        sigma and the features ``f(s)`` get gradients) and ``std^2 = f(s)^2 sigma^2``.
        """
        if self.use_sde:
            mean, features = self.actor(observations, training=training)
            mean = ops.clip(mean, -SDE_MEAN_BOUND, SDE_MEAN_BOUND)
            log_sigma = self.actor.sde_log_std
            log_std = StateDependentNoise.log_std(features, log_sigma, learn_features=True, expln=self.use_expln)
            sigma = StateDependentNoise.sigma(log_sigma, self.use_expln)
            noise = ops.matmul(features, sigma * sde_noise) * ops.exp(-log_std)
        else:
            mean, log_std = ops.split(self.actor(observations, training=training), 2, axis=-1)
            log_std = ops.clip(log_std, LOG_STD_MIN, LOG_STD_MAX)
            noise = keras.random.normal(ops.shape(mean), seed=self.graph_random)
        u = mean + ops.exp(log_std) * noise
        log_prob = ops.sum(-0.5 * noise ** 2 - log_std - 0.5 * math.log(2 * math.pi), -1)
        log_prob -= ops.sum(2.0 * (math.log(2.0) - u - ops.softplus(-2.0 * u)), -1)
        return ops.tanh(u), log_prob

    def draw_sde_noise(self):
        """A gSDE noise matrix of standard normals (None without gSDE): one per gradient step, as
        Stable-Baselines3 draws it."""
        return keras.random.normal(self.actor.sde_log_std.shape, seed=self.graph_random) if self.use_sde else None

    def action_values(self, observations, actions):
        if self.discrete:
            one_hot = ops.one_hot(ops.cast(actions, 'int32'), self.n_actions)
            return ops.sum(self.q_values(self.critic, observations) * one_hot, -1)
        return self.q_values(self.critic, observations, actions)

    def next_values(self, next_observations, sde_noise=None, next_action_masks=None):
        """Soft values ``min_i Q_targ_i(s', a') - alpha log pi(a'|s')``: of one ``a' ~ pi(.|s')`` for Box
        actions (with gSDE, drawn with ``sde_noise``, or a matrix of its own), their expectation over
        ``pi(.|s')`` for discrete ones (over the actions ``next_action_masks`` allows)."""
        alpha = ops.exp(self.log_alpha)
        if self.discrete:
            next_log_probs = ops.log_softmax(masked_logits(self.actor(next_observations), next_action_masks))
            next_q = ops.min(self.q_values(self.target_critic, next_observations), 0)
            return expectation(next_log_probs, next_q - alpha * next_log_probs, next_action_masks)
        if sde_noise is None:
            sde_noise = self.draw_sde_noise()
        next_actions, next_log_probs = self.squashed_gaussian(next_observations, sde_noise)
        next_q = ops.min(self.q_values(self.target_critic, next_observations, next_actions), 0)
        return next_q - alpha * next_log_probs

    def train_step(self, observations, actions, rewards, next_observations, discounts, weights,
                   action_masks=None, next_action_masks=None):
        if self.discrete:
            return self.discrete_train_step(observations, actions, rewards, next_observations, discounts, weights,
                                            action_masks, next_action_masks)
        alpha = ops.exp(self.log_alpha)
        sde_noise = self.draw_sde_noise()  # the same matrix for the target's and the actor's actions
        targets = ops.stop_gradient(rewards + discounts * self.next_values(next_observations, sde_noise))
        td_errors, critic_loss = self.critic_step(observations, actions, targets, weights)
        return {'critic_loss': critic_loss, **self.actor_step(observations, sde_noise, alpha)}, td_errors[0]

    def policy_q(self, observations, actions):
        """``(batch,)`` what the actor maximises at ``(s, a~)`` (Box actions): the smaller of the twin Q-values."""
        return ops.min(self.q_values(self.critic, observations, actions), 0)

    def actor_step(self, observations, sde_noise, alpha, training: bool = False) -> dict:
        """One step of the actor (in training mode with ``training``) on ``E[alpha log pi(a~|s) - Q(s, a~)]`` and
        one of alpha (Box actions); their metrics."""
        def actor_objective():
            new_actions, log_probs = self.squashed_gaussian(observations, sde_noise, training)
            return ops.mean(alpha * log_probs - self.policy_q(observations, new_actions)), log_probs

        actor_variables = self.actor.trainable_variables
        (actor_loss, log_probs), gradients = backend.value_and_grad(actor_objective, actor_variables)
        self.actor_optimizer.apply(gradients, actor_variables)
        return {'actor_loss': actor_loss, 'alpha_loss': self.update_alpha(log_probs), 'alpha': alpha,
                'entropy': -ops.mean(log_probs)}

    def critic_step(self, observations, actions, targets, weights) -> tuple:
        """One step of the twin critics on ``1/2 sum_i E[w (Q_i(s, a) - y)^2]``; ``(td_errors (2, batch), loss)``."""
        def critic_objective():
            td_errors = self.action_values(observations, actions) - targets
            return 0.5 * ops.sum(ops.mean(weights * td_errors ** 2, -1)), td_errors

        critic_variables = self.critic.trainable_variables
        (critic_loss, td_errors), gradients = backend.value_and_grad(critic_objective, critic_variables)
        self.critic_optimizer.apply(gradients, critic_variables)
        return td_errors, critic_loss

    def discrete_train_step(self, observations, actions, rewards, next_observations, discounts, weights,
                            action_masks=None, next_action_masks=None):
        """The discrete-action update (Christodoulou 2019): exact expectations over (the allowed) actions."""
        alpha = ops.exp(self.log_alpha)
        targets = ops.stop_gradient(rewards + discounts * self.next_values(next_observations, None, next_action_masks))
        td_errors, critic_loss = self.critic_step(observations, actions, targets, weights)
        q = ops.stop_gradient(ops.min(self.q_values(self.critic, observations), 0))

        def actor_objective():
            log_probs = ops.log_softmax(masked_logits(self.actor(observations), action_masks))
            return ops.mean(expectation(log_probs, alpha * log_probs - q, action_masks)), log_probs

        actor_variables = self.actor.trainable_variables
        (actor_loss, log_probs), gradients = backend.value_and_grad(actor_objective, actor_variables)
        self.actor_optimizer.apply(gradients, actor_variables)
        expected_log_probs = expectation(log_probs, log_probs, action_masks)
        alpha_loss = self.update_alpha(expected_log_probs, self.reachable_entropy(action_masks))
        metrics = {'critic_loss': critic_loss, 'actor_loss': actor_loss, 'alpha_loss': alpha_loss,
                   'alpha': alpha, 'entropy': -ops.mean(expected_log_probs)}
        return metrics, td_errors[0]

    def reachable_entropy(self, action_masks=None):
        """The entropy aimed at: ``target_entropy``, or per sample ``target_entropy * log(k) / log(n)`` in states
        with ``k`` of ``n`` actions allowed (the maximum entropy there is ``log k``, and an unreachable target would
        raise alpha without end)."""
        if action_masks is None or self.n_actions < 2:
            return self.target_entropy
        allowed = ops.sum(ops.cast(action_masks, 'float32'), -1)
        return self.target_entropy * ops.log(allowed) / math.log(self.n_actions)

    def update_alpha(self, log_probs, target_entropy=None):
        """One step on ``-E[log alpha * (log pi + target_entropy)]`` (a no-op for a fixed alpha)."""
        if not self.auto_alpha:
            return ops.zeros(())
        target_entropy = self.target_entropy if target_entropy is None else target_entropy
        aim = ops.stop_gradient(log_probs + target_entropy)
        (alpha_loss, _), gradients = backend.value_and_grad(lambda: (-ops.mean(self.log_alpha * aim), ()),
                                                            [self.log_alpha])
        self.alpha_optimizer.apply(gradients, [self.log_alpha])
        return alpha_loss


def expectation(log_probs, values, action_masks=None):
    """``sum_a pi(a) values(a)`` ``(batch,)`` of ``pi = exp(log_probs)``, over the actions ``action_masks`` allows
    (a masked action's ``pi`` is 0 and its ``values`` may be huge: left out rather than multiplied)."""
    terms = ops.exp(log_probs) * values
    if action_masks is not None:
        terms = ops.where(ops.cast(action_masks, 'bool'), terms, ops.zeros_like(terms))
    return ops.sum(terms, -1)
