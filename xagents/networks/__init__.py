"""Networks: the .cfg reader that builds Keras models, the recurrent layer, and the acting pass."""
