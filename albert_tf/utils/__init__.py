"""The project's own utilities, used by every package, the data code included.

Nothing here imports TensorFlow or Keras at module level, so the input
pipeline and the CLI's start-up import them freely:

- `errors`: the errors a command shows its user (`UserError`, `RunStopped`).
- `preemption`: SIGTERM as a request to stop at the next safe point.
- `files`: every read and write through `tf.io.gfile` (local, `gs://`,
  `ram://`), and `publish`, which makes an output appear whole or not at all.
- `lazy`: PEP 562 lazy public names for package `__init__` modules.
- `config_base`: the dataclass configs' JSON and flag documentation.
- `layout`: the names of the files and directories the outputs hold (runs,
  create-data, exports), and the paths built from them.
"""
