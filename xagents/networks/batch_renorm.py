"""Batch renormalisation (Ioffe 2017, https://arxiv.org/abs/1702.03275), the normalisation CrossQ's networks use."""
from __future__ import annotations

import keras
import numpy as np
from keras import ops


class BatchRenorm(keras.layers.Layer):
    """Normalise each feature, then scale and shift it by learned ``gamma``, ``beta``.

    In training (``training=True``) the batch is normalised by its own mean and standard deviation, corrected towards
    the running ones once ``warmup_steps`` training calls have passed:
        r = clip(sigma_B / sigma, 1 / r_max, r_max),  d = clip((mu_B - mu) / sigma, -d_max, d_max)  (no gradient)
        x^ = (x - mu_B) / sigma_B * r + d
    (before that, r = 1 and d = 0: plain batch normalisation), and the running statistics move towards the batch's,
    ``mu <- mu + momentum (mu_B - mu)``, likewise the variance. Otherwise ``x^ = (x - mu) / sigma`` with the running
    ones, untouched. ``sigma = sqrt(var + epsilon)``; the batch variance is the unbiased one. These are
    sb3-contrib's choices (``BatchRenorm1d``: r_max 3, d_max 5, no relaxation schedule after the warm-up).
    """

    def __init__(self, momentum: float = 0.01, epsilon: float = 1e-3, warmup_steps: int = 100_000,
                 r_max: float = 3.0, d_max: float = 5.0, **kwargs) -> None:
        super().__init__(**kwargs)
        self.momentum, self.epsilon, self.warmup_steps = momentum, epsilon, warmup_steps
        self.r_max, self.d_max = r_max, d_max

    def build(self, input_shape) -> None:
        # float32 even in a bfloat16 layer (autocast off, as Keras' BatchNormalization): the statistics are kept
        # and applied in float32, whatever the layer's compute dtype.
        features = (int(input_shape[-1]),)
        self.gamma = self.add_weight(shape=features, initializer='ones', name='gamma', autocast=False)
        self.beta = self.add_weight(shape=features, initializer='zeros', name='beta', autocast=False)
        self.moving_mean = self.add_weight(shape=features, initializer='zeros', trainable=False, name='moving_mean',
                                           autocast=False)
        self.moving_variance = self.add_weight(shape=features, initializer='ones', trainable=False,
                                               name='moving_variance', autocast=False)
        self.steps = self.add_weight(shape=(), initializer='zeros', trainable=False, dtype='int32', name='steps')

    def call(self, x, training: bool = False):
        x = ops.cast(x, 'float32')
        if training:
            count = ops.cast(ops.shape(x)[0], 'float32')
            mean = ops.mean(x, 0)
            variance = ops.var(x, 0) * count / (count - 1)
            running_std = ops.sqrt(self.moving_variance + self.epsilon)
            warm = ops.greater(self.steps, self.warmup_steps)
            r = ops.clip(ops.sqrt(variance + self.epsilon) / running_std, 1 / self.r_max, self.r_max)
            d = ops.clip((mean - self.moving_mean) / running_std, -self.d_max, self.d_max)
            r = ops.stop_gradient(ops.where(warm, r, ops.ones_like(r)))
            d = ops.stop_gradient(ops.where(warm, d, ops.zeros_like(d)))
            # (x - mu_B) / sigma_B * r + d, written as a normalisation by a corrected mean and variance
            centre, spread = mean - d * ops.sqrt(variance) / r, variance / r ** 2
            self.moving_mean.assign(self.moving_mean + self.momentum * (ops.stop_gradient(mean) - self.moving_mean))
            self.moving_variance.assign(
                self.moving_variance + self.momentum * (ops.stop_gradient(variance) - self.moving_variance))
            self.steps.assign(self.steps + 1)
        else:
            centre, spread = self.moving_mean, self.moving_variance
        y = (x - centre) / ops.sqrt(spread + self.epsilon) * self.gamma + self.beta
        return ops.cast(y, self.compute_dtype)

    def inference_affine(self) -> tuple[np.ndarray, np.ndarray]:
        """``(a, b)``, NumPy, such that the layer outside training computes ``x * a + b``."""
        a = self.gamma.numpy() / np.sqrt(self.moving_variance.numpy() + self.epsilon)
        return a.astype(np.float32), (self.beta.numpy() - self.moving_mean.numpy() * a).astype(np.float32)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self) -> dict:
        return {**super().get_config(), 'momentum': self.momentum, 'epsilon': self.epsilon,
                'warmup_steps': self.warmup_steps, 'r_max': self.r_max, 'd_max': self.d_max}
