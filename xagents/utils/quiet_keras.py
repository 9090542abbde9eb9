"""``import xagents.utils.quiet_keras`` before ``import keras``: Keras and its backend (TensorFlow's C++ runtime
included), loaded without their start-up noise.

Modules that users import directly (``xagents.utils.common``, ``xagents.agent.base``...) import it first, so importing
them prints nothing, as ``from xagents import PPO`` does.
"""
from xagents.utils.console import load_keras

load_keras()
