"""``from xagents.utils.quiet_tensorflow import tf``: TensorFlow, loaded without its C++ start-up noise.

Modules that users import directly (``xagents.utils.common``, ``xagents.agent.base``...) take TensorFlow from
here, so importing them prints nothing, as ``import xagents`` does.
"""
from xagents.utils.console import load_tensorflow

load_tensorflow()

import tensorflow as tf  # noqa: E402  (after the quiet load above)

__all__ = ['tf']
