"""RMSProp as TensorFlow 1 computes it, the optimizer of A2C's and ACER's papers and of OpenAI Baselines."""
from __future__ import annotations

import keras
from keras import ops


class RMSpropTF1(keras.optimizers.Optimizer):
    """RMSProp with TensorFlow 1's ``RMSPropOptimizer`` arithmetic (momentum 0, not centered).

    Per variable, with gradient ``g`` (``training_ops.ApplyRMSProp``)::

        ms = rho * ms + (1 - rho) * g^2
        theta -= learning_rate * g / sqrt(ms + epsilon)

    with ``ms`` starting at **ones**. Keras' ``RMSprop`` computes the same but starts ``ms`` at
    zeros, so its first updates are ``lr * g / sqrt((1 - rho) g^2 + eps)``, about ``lr / 0.1``
    per weight at ``rho = 0.99``: for ``g = 0.1`` some 95 times what Baselines' A2C and ACER take.
    Stable-Baselines3's ``RMSpropTFLike`` (RL Zoo's Atari A2C) is this optimizer in PyTorch.

    The state (one ``mean_square`` per variable) is ordinary optimizer variables: checkpoints
    save and restore it, and updates run inside compiled updates on every backend. Keras' base-class options
    (``global_clipnorm``...) apply as for any Keras optimizer.
    """

    def __init__(self, learning_rate: float = 0.001, rho: float = 0.9, epsilon: float = 1e-10, **kwargs) -> None:
        """
        Args:
            learning_rate: Step size (TensorFlow 1 had no default).
            rho: Decay of the squared-gradient average (TensorFlow 1's ``decay``, default 0.9).
            epsilon: Added to the average inside the square root (TensorFlow 1's default 1e-10).
            **kwargs: Keras ``Optimizer`` options, such as ``global_clipnorm`` or ``name``.
        """
        super().__init__(learning_rate=learning_rate, **kwargs)
        self.rho, self.epsilon = rho, epsilon

    def build(self, variables: list) -> None:
        if self.built:
            return
        super().build(variables)
        self._mean_squares = self.add_optimizer_variables(variables, 'mean_square', initializer='ones')

    def update_step(self, gradient, variable: keras.Variable, learning_rate) -> None:
        mean_square = self._mean_squares[self._get_variable_index(variable)]
        learning_rate = ops.cast(learning_rate, variable.dtype)
        gradient = ops.cast(gradient, variable.dtype)
        self.assign(mean_square, self.rho * mean_square + (1 - self.rho) * ops.square(gradient))
        self.assign_sub(variable, learning_rate * gradient / ops.sqrt(mean_square + self.epsilon))

    def get_config(self) -> dict:
        return {**super().get_config(), 'rho': self.rho, 'epsilon': self.epsilon}
