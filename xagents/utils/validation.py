"""One rule per kind of parameter, applied the same way to every agent, ``fit``, ``play`` and env creation.

A parameter's kind comes from :data:`KINDS`; its type from its annotation (``int`` parameters take
integers only, every ``float`` must be finite, ``bool`` parameters take booleans). Functions
decorated with :func:`validated` check every argument given explicitly before they run, so a bad
value is one ``ValueError`` naming the parameter, never a silent NaN run or a crash mid-training.
"""
from __future__ import annotations

import functools
import inspect
import math
import numbers
from typing import Any, Callable

from xagents.utils.names import SB3_VALUES, unknown_parameter

# kind: (test, how the accepted range is written in messages)
RULES: dict[str, tuple[Callable[[float], bool], str]] = {
    'probability': (lambda x: 0 <= x <= 1, '0 <= {name} <= 1'),
    'decay': (lambda x: 0 <= x < 1, '0 <= {name} < 1'),
    'fraction': (lambda x: 0 < x <= 1, '0 < {name} <= 1'),
    'shrink': (lambda x: 0 < x < 1, '0 < {name} < 1'),
    'rate': (lambda x: x > 0, '{name} > 0'),
    'coefficient': (lambda x: x >= 0, '{name} >= 0'),
    'count': (lambda x: x >= 1, '{name} >= 1'),
    'steps': (lambda x: x >= 0, '{name} >= 0'),
    'real': (lambda x: True, 'a finite {name}'),  # any finite number (a log, which may be negative)
}

KINDS: dict[str, str] = {
    **dict.fromkeys(('gamma', 'lam', 'epsilon_start', 'epsilon_end', 'priority_beta'), 'probability'),
    **dict.fromkeys(('beta1', 'beta2', 'rmsprop_alpha', 'ema_alpha'), 'decay'),
    **dict.fromkeys(('tau', 'plateau_reduce_factor', 'batch_norm_momentum'), 'fraction'),
    'line_search_shrink': 'shrink',
    **dict.fromkeys(('lr', 'opt_epsilon', 'rmsprop_epsilon', 'grad_norm', 'clip_range', 'target_kl', 'max_kl',
                     'cg_damping', 'cg_residual_tolerance', 'delta', 'importance_c', 'alpha', 'initial_alpha'),
                    'rate'),
    **dict.fromkeys(('entropy_coef', 'value_loss_coef', 'critic_l2', 'replay_ratio', 'priority_alpha',
                     'policy_noise_coef', 'noise_clip'), 'coefficient'),
    **dict.fromkeys(('n_envs', 'n_steps', 'return_steps', 'ppo_epochs', 'mini_batches', 'reward_buffer_size', 'log_frequency',
                     'buffer_max_size', 'buffer_initial_size', 'buffer_batch_size', 'update_every', 'gradient_steps',
                     'target_update_interval', 'epsilon_decay_steps', 'priority_beta_steps', 'her_goals', 'policy_delay',
                     'sequence_length', 'cg_iterations', 'line_search_steps', 'critic_iterations',
                     'plateau_reduce_patience', 'early_stop_patience', 'lr_decay_steps', 'max_steps',
                     'eval_frequency', 'eval_episodes', 'frame_frequency', 'episodes', 'save_frequency',
                     'save_keep', 'workers', 'sde_sample_freq', 'max_episode_steps', 'n_quantiles', 'n_critics'), 'count'),
    **dict.fromkeys(('start_steps', 'update_after', 'plateau_start_steps', 'seed', 'noop_max',
                     'top_quantiles_to_drop_per_net', 'renorm_warmup_steps'), 'steps'),
    'log_std_init': 'real',
}


# Parameters renamed so that a name says one thing, old name: new name; the old names work for one
# more release, with a notice (a constructor argument, or a flag), except those in KEPT.
RENAMED = {
    'clip_norm': 'clip_range',  # PPO's ratio clip, not a gradient norm (that is grad_norm)
    'divergence_monitoring_steps': 'plateau_start_steps',  # when the plateau rules start
    'buffer_size': 'buffer_max_size',  # ACER's replay capacity, named as the off-policy agents' is
    'replay_start': 'buffer_initial_size',  # ACER's segments stored before replay, likewise
    'n_steps': 'return_steps',  # off-policy n-step returns (on-policy n_steps is the rollout length)
}
# Old names that are Stable-Baselines3's too (its replay capacity): taken for good, without a notice.
KEPT = {'buffer_size'}


def check_value(name: str, value: Any, annotation: str = '') -> None:
    """Raise a ValueError with "expected ..., got ..." if ``value`` breaks the rule of ``name``'s kind
    or its annotated type, saying what a value of Stable-Baselines3's means here. None passes where the annotation
    allows it."""
    try:
        _check_value(name, value, annotation)
    except ValueError as error:
        hint = SB3_VALUES.get((name, value)) if isinstance(value, (str, int)) else None
        if hint:
            raise ValueError(f'{error}: {hint}') from None
        raise


def _check_value(name: str, value: Any, annotation: str) -> None:
    if value is None and (not annotation or 'None' in annotation):
        return
    number = isinstance(value, numbers.Real) and not isinstance(value, bool)  # (not complex: no range to check)
    if _is(annotation, 'bool') and not _is(annotation, 'int', 'float') and not isinstance(value, bool):
        raise ValueError(f'expected {name} to be true or false, got {value!r}')
    if _is(annotation, 'int') and not _is(annotation, 'float') and not (
            isinstance(value, numbers.Integral) and not isinstance(value, bool)):
        raise ValueError(f'expected {name} to be an integer, got {value!r}')
    if _is(annotation, 'float') and not number:
        raise ValueError(f'expected {name} to be a number, got {value!r}')
    if number and not math.isfinite(value):
        raise ValueError(f'expected a finite {name}, got {value}')
    kind = KINDS.get(name)
    if kind and number:
        test, accepted = RULES[kind]
        if not test(value):
            raise ValueError(f'expected {accepted.format(name=name)}, got {value}')


def _is(annotation: str, *types: str) -> bool:
    words = annotation.replace('|', ' ').replace('[', ' ').replace(']', ' ').replace(',', ' ').split()
    return any(word in types for word in words)


def validated(function: Callable) -> Callable:
    """Check every argument given to ``function`` explicitly (defaults are trusted) before it runs."""
    signature = inspect.signature(function)
    parameters = set(signature.parameters) - {'self', 'cls'}
    takes_any = any(parameter.kind == parameter.VAR_KEYWORD for parameter in signature.parameters.values())

    @functools.wraps(function)
    def checked(*args, **kwargs):
        unknown = [] if takes_any else sorted(set(kwargs) - parameters)
        if unknown:
            owner = function.__name__
            if args and 'self' in signature.parameters:
                owner = f'{type(args[0]).__name__}.{owner}'
            elif args and 'cls' in signature.parameters:
                owner = f'{args[0].__name__}.{owner}'
            raise unknown_parameter(owner, unknown[0], parameters)
        for name, value in signature.bind_partial(*args, **kwargs).arguments.items():
            parameter = signature.parameters[name]
            if parameter.kind not in (parameter.VAR_KEYWORD, parameter.VAR_POSITIONAL):
                annotation = parameter.annotation
                check_value(name, value, annotation if isinstance(annotation, str) else str(annotation))
        return function(*args, **kwargs)

    return checked
