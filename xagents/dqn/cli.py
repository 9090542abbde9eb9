"""What ``xagents tune dqn`` may search; types, defaults and help come from the DQN signature.

``log``: a ``MIN MAX`` range is searched log-uniformly; ``uniform``: searched uniformly;
``categorical``: choices only. Parameters not listed here take one fixed value in a search.
"""
TUNABLE = {
    'lr': 'log',
    'n_envs': 'log',
    'gamma': 'uniform',
    'buffer_batch_size': 'log',
    'buffer_initial_size': 'log',
    'update_every': 'log',
    'gradient_steps': 'log',
    'target_update_interval': 'log',
    'tau': 'log',
    'epsilon_end': 'uniform',
    'epsilon_decay_steps': 'log',
    'n_steps': 'log',
    'grad_norm': 'log',
    'double': 'categorical',
    'dueling': 'categorical',
    'prioritized': 'categorical',
    'model': 'categorical',
}
