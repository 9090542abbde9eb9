"""TRPO's command-line face: what ``xagents tune trpo`` searches (and how), examples, and the syntax
of its own flags; everything else about a flag comes from TRPO's signature."""
from xagents.utils.tunable import ON_POLICY_TUNABLE

TUNABLE = {
    **ON_POLICY_TUNABLE, 'max_kl': 'log', 'cg_iterations': 'uniform', 'cg_damping': 'log',
    'line_search_shrink': 'uniform', 'critic_iterations': 'uniform', 'mini_batches': 'log',
    'normalize_advantages': 'categorical', 'actor_model': 'categorical', 'critic_model': 'categorical',
}

# Inherited from OnPolicy, but TRPO's step assumes a state-independent std: no flags for gSDE.
NOT_FLAGS = {'use_sde', 'sde_sample_freq'}

EXAMPLES = [
    'xagents train trpo --env CartPole-v1 --target-reward 475',
    'xagents train trpo --env Pendulum-v1 --target-reward -250',
]
