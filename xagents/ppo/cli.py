"""What ``xagents tune ppo`` may search; types, defaults and help come from the PPO signature.

``log``: a ``MIN MAX`` range is searched log-uniformly (scale-like values: rates, coefficients,
sizes); ``uniform``: searched uniformly; ``categorical``: choices only. Numeric flags also take
choices. Parameters not listed here take one fixed value in a search.
"""
TUNABLE = {
    'lr': 'log',
    'n_steps': 'log',
    'n_envs': 'log',
    'lam': 'uniform',
    'gamma': 'uniform',
    'clip_norm': 'uniform',
    'ppo_epochs': 'uniform',
    'mini_batches': 'log',
    'entropy_coef': 'log',
    'value_loss_coef': 'log',
    'grad_norm': 'log',
    'target_kl': 'log',
    'opt_epsilon': 'log',
    'normalize_advantages': 'categorical',
    'model': 'categorical',
}
