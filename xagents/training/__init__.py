"""One training run: fit, the Run and its callbacks, evaluation, and the Ray pool of workers."""
