"""The tf.distribute strategies by name (`albert_tf.distribute` builds them), without TensorFlow.

The commands' --strategy flags read these before TensorFlow loads, so a bad
value is reported at once.
"""

STRATEGY_NAMES = ("default", "mirrored", "multi_worker", "tpu")
