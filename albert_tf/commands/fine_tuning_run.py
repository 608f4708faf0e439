"""A fine-tuning run's way to its --out, for `finetune` and `distill`: written beside it, published whole.

The run is written in OUT's parent as .unfinished-NAME/ (`layout.unfinished_dir`)
and becomes OUT when it ends. A stop (SIGTERM or Ctrl-C) keeps the newest checkpoint,
which a rerun of the same command resumes from, and says so.
"""

import os

from albert_tf.commands.outputs import ENTRY_FILES
from albert_tf.hub import write_source
from albert_tf.utils import files
from albert_tf.utils.errors import RunStopped
from albert_tf.utils.layout import RESUME_DIR, unfinished_dir


def train_then_publish(train, out, source, strategy):
    """Runs `train(work)` (a fine-tuning run into `work`, the unfinished run beside `out`) and publishes it as
    `out` (the chief alone); on a stop, keeps or removes `work` as the module says and adds what to do next.
    A full disk or a read-only file system while writing is the user's to fix (`files.write_failures_as_user_errors`).

    Returns what `train` returned.
    """
    from albert_tf.distribute import is_chief  # deferred: it loads TensorFlow, which the commands load late

    chief = is_chief(strategy)
    work = unfinished_dir(out)
    try:
        with files.write_failures_as_user_errors(out):
            result = train(work)
    except RunStopped as stop:
        if not chief:
            stop.saved, stop.path = None, None
            stop.then = f"Worker {strategy.cluster_resolver.task_id}: the chief alone writes {out}."
        elif not stop.saved:
            files.rmtree(work, ignore_errors=True)
        else:
            stop.then = (f"The unfinished run is in {work}: rerun the same command to resume it there; it becomes "
                         f"{out} when it ends.")
        raise
    except BaseException:
        if chief and not files.isdir(os.path.join(work, RESUME_DIR)):
            files.rmtree(work, ignore_errors=True)  # nothing a rerun could resume
        raise
    if chief:
        with files.write_failures_as_user_errors(out):
            _publish(work, out, source)
    return result


def _publish(work, out, source):
    """Publishes the finished (or kept) run in `work` as `out`, whole (`files.publish`), and removes `work`.

    `source`: the resolved `--model` (`albert_tf.hub.resolve`), recorded when it came from a hub.
    """
    with files.publish(out, ENTRY_FILES) as staging:
        write_source(source, staging)
        for name in files.listdir(work):
            files.move(os.path.join(work, name.rstrip("/")), os.path.join(staging, name.rstrip("/")))
    files.rmtree(work, ignore_errors=True)
