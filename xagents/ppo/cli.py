"""What ``xagents tune ppo`` may search and how; everything else about a flag comes from PPO's signature."""
from xagents.utils.cli import ON_POLICY_TUNABLE, LOSS_COEFFICIENTS_TUNABLE

TUNABLE = {
    **ON_POLICY_TUNABLE, **LOSS_COEFFICIENTS_TUNABLE, 'clip_norm': 'uniform', 'ppo_epochs': 'uniform',
    'mini_batches': 'log', 'target_kl': 'log', 'opt_epsilon': 'log', 'normalize_advantages': 'categorical',
    'model': 'categorical',
}
