"""What ``xagents tune ddpg`` may search; types, defaults and help come from the DDPG signature.

``log``: a ``MIN MAX`` range is searched log-uniformly; ``uniform``: searched uniformly;
``categorical``: choices only. Parameters not listed here take one fixed value in a search.
"""
TUNABLE = {
    'lr': 'log',
    'n_envs': 'log',
    'gamma': 'uniform',
    'tau': 'log',
    'buffer_batch_size': 'log',
    'buffer_initial_size': 'log',
    'update_every': 'log',
    'gradient_steps': 'log',
    'n_steps': 'log',
    'noise_type': 'categorical',
    'actor_model': 'categorical',
    'critic_model': 'categorical',
    'critic_l2': 'log',
}
