"""PPO's command-line face: what ``xagents tune ppo`` searches (and how), examples, and the syntax
of its own flags; everything else about a flag comes from PPO's signature."""
from xagents.utils.tunable import ON_POLICY_TUNABLE, LOSS_COEFFICIENTS_TUNABLE

TUNABLE = {
    **ON_POLICY_TUNABLE, **LOSS_COEFFICIENTS_TUNABLE, 'clip_range': 'uniform', 'ppo_epochs': 'uniform',
    'mini_batches': 'log', 'target_kl': 'log', 'opt_epsilon': 'log', 'normalize_advantages': 'categorical',
    'model': 'categorical', 'use_sde': 'categorical', 'log_std_init': 'uniform',
}

EXAMPLES = [
    'xagents train ppo --env CartPole-v1 --target-reward 475',
    'xagents train ppo --env PongNoFrameskip-v4 --n-envs 8 --max-steps 1000000',
]
