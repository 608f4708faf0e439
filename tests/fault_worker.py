"""tests/training_worker.py with a save that SIGKILLs its own process midway, for tests/training/test_faults.py.

    python tests/fault_worker.py --kill-in final          [training_worker.py args]
    python tests/fault_worker.py --kill-in checkpoint-4   [training_worker.py args]

`final`: `save_pretrained` has written the configs and part of the weights
file when the process dies. `checkpoint-N`: TensorFlow has written checkpoint
N's files (to wherever the trainer asked) when the process dies, before the
trainer could publish them.
"""

import os
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def die():
    os.kill(os.getpid(), signal.SIGKILL)


def main():
    if sys.argv[1] != "--kill-in":
        raise SystemExit("usage: fault_worker.py --kill-in final|checkpoint-N [training_worker args]")
    where = sys.argv[2]
    del sys.argv[1:3]

    import keras
    import tensorflow as tf

    if where == "final":
        def save_weights(model, path, *args, **kwargs):
            with open(path, "wb") as f:
                f.write(b"\x89HDF\r\n\x1a\n only the first bytes")
            die()

        keras.Model.save_weights = save_weights
    else:
        step = int(where.removeprefix("checkpoint-"))
        write = tf.train.Checkpoint.write

        def write_then_die(checkpoint, path, *args, **kwargs):
            result = write(checkpoint, path, *args, **kwargs)
            if os.path.basename(path) == f"ckpt-{step}":
                die()
            return result

        tf.train.Checkpoint.write = write_then_die

    import training_worker

    training_worker.main()


if __name__ == "__main__":
    main()
