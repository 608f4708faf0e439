"""One module per `albert-tf` subcommand; see `albert_tf.cli`."""
