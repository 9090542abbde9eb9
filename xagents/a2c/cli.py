"""What ``xagents tune a2c`` may search; types, defaults and help come from the A2C signature.

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
    'entropy_coef': 'log',
    'value_loss_coef': 'log',
    'grad_norm': 'log',
    'opt_epsilon': 'log',
    'model': 'categorical',
}
