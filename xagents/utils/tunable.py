"""How ``xagents tune`` searches the parameters many agents share (each agent's ``cli.py`` adds its own)."""

# 'log': a MIN MAX range is searched log-uniformly (rates, coefficients, sizes); 'uniform':
# uniformly; 'categorical': choices only. Parameters not listed take one fixed value in a search.
COMMON_TUNABLE = {'lr': 'log', 'n_envs': 'log', 'gamma': 'uniform'}
ON_POLICY_TUNABLE = {**COMMON_TUNABLE, 'n_steps': 'log', 'lam': 'uniform'}
LOSS_COEFFICIENTS_TUNABLE = {'entropy_coef': 'log', 'value_loss_coef': 'log', 'grad_norm': 'log'}
OFF_POLICY_TUNABLE = {**COMMON_TUNABLE, 'return_steps': 'log', 'tau': 'log', 'buffer_batch_size': 'log', 'buffer_initial_size': 'log',
                      'update_every': 'log', 'gradient_steps': 'log'}
