"""Seeding Keras' and NumPy's global random streams, shared by the backends that are not TensorFlow."""
from __future__ import annotations

import random

import numpy as np


def seed_keras_and_numpy(seed: int) -> None:
    """Seed Python's, NumPy's and Keras' global random streams (layer initialisers) as
    ``keras.utils.set_random_seed`` does, without importing TensorFlow to seed it too (seconds of start-up, and
    TensorFlow need not be installed)."""
    from keras.src.backend.common import global_state
    from keras.src.random import seed_generator
    from keras.src.utils import rng_utils

    global_state.set_global_attribute(rng_utils.GLOBAL_RANDOM_SEED, seed)
    global_state.set_global_attribute(seed_generator.GLOBAL_SEED_GENERATOR, None)
    random.seed(seed)
    np.random.seed(seed)
