"""The maths agents share, in ``keras.ops`` (action distributions, trust-region and Retrace maths, optimisers) and NumPy (returns): written once, for every backend."""
