"""What ``xagents tune trpo`` may search; types, defaults and help come from the TRPO signature.

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
    'max_kl': 'log',
    'cg_iterations': 'uniform',
    'cg_damping': 'log',
    'line_search_shrink': 'uniform',
    'critic_iterations': 'uniform',
    'mini_batches': 'log',
    'normalize_advantages': 'categorical',
    'actor_model': 'categorical',
    'critic_model': 'categorical',
}
