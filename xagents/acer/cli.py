"""What ``xagents tune acer`` may search; types, defaults and help come from the ACER signature.

``log``: a ``MIN MAX`` range is searched log-uniformly (scale-like values: rates, coefficients,
sizes); ``uniform``: searched uniformly; ``categorical``: choices only. Numeric flags also take
choices. Parameters not listed here take one fixed value in a search.
"""
TUNABLE = {
    'lr': 'log',
    'n_steps': 'log',
    'n_envs': 'log',
    'gamma': 'uniform',
    'entropy_coef': 'log',
    'value_loss_coef': 'log',
    'grad_norm': 'log',
    'importance_c': 'log',
    'delta': 'log',
    'ema_alpha': 'uniform',
    'replay_ratio': 'uniform',
    'buffer_size': 'log',
    'replay_start': 'log',
    'rmsprop_epsilon': 'log',
    'trust_region': 'categorical',
    'model': 'categorical',
}
