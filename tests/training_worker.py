"""Runs a tiny Trainer in its own process, for the distributed and kill/resume tests.

    python tests/training_worker.py --strategy mirrored --run-dir DIR --out weights.npz

Multi-worker runs read their cluster from TF_CONFIG. --seconds-per-batch slows
the input so that a test can kill the run between checkpoints.
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--strategy", default="default")
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--out")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--checkpoint-every", type=int, default=100)
    parser.add_argument("--seconds-per-batch", type=float, default=0.0)
    parser.add_argument("--steps-per-loop", type=int, help="Default: TrainerConfig's.")
    parser.add_argument("--compile-step", default="auto")
    parser.add_argument("--fit", action="store_true", help="Train with model.fit instead of Trainer.")
    parser.add_argument("--stop-at-step", type=int,
                        help="Worker 1 of a cluster alone asks to stop (as on SIGTERM) once at this step.")
    parser.add_argument("--notice-on-worker-1", action="store_true",
                        help="Worker 1 of a cluster alone gets a preemption notice, from the start.")
    args = parser.parse_args()

    from albert_tf.distribute import configure_logical_cpus, get_strategy

    if args.strategy == "mirrored":
        configure_logical_cpus(2)
    import numpy as np
    import tensorflow as tf

    from albert_tf.training import Trainer
    from training_helpers import TINY_MODEL, array_dataset_fn, synthetic_examples, tiny_trainer_config, weights_of

    if args.fit:
        from training_helpers import fit_weights

        np.savez(args.out, *fit_weights(get_strategy(args.strategy), args.steps))
        return
    dataset_fn = array_dataset_fn(synthetic_examples())
    if args.seconds_per_batch:
        def slow(inputs, labels):
            tf.py_function(lambda: time.sleep(args.seconds_per_batch), [], [])
            return inputs, labels

        plain_fn = dataset_fn
        dataset_fn = lambda *a: plain_fn(*a).map(slow)  # noqa: E731
    loop = {"steps_per_loop": args.steps_per_loop} if args.steps_per_loop else {}
    config = tiny_trainer_config(num_steps=args.steps, checkpoint_every=args.checkpoint_every,
                                 compile_step=args.compile_step, **loop)
    trainer = Trainer(TINY_MODEL, config, args.run_dir, dataset_fn, strategy=get_strategy(args.strategy))
    print(f"compile_step: {trainer.compile_step}")
    if args.stop_at_step or args.notice_on_worker_1:
        from albert_tf.utils.errors import RunStopped

        index = json.loads(os.environ.get("TF_CONFIG", "{}")).get("task", {}).get("index")
        try:
            if args.notice_on_worker_1:
                trainer.train(preemption_notice=lambda: index == 1)
            else:
                trainer.train(stop_requested=lambda: index == 1 and trainer.step >= args.stop_at_step)
        except RunStopped as stopped:
            print(f"stopped at step {stopped.step}, saved {stopped.path}, by {stopped.cause}")
        return
    trainer.train()
    if args.out:
        np.savez(args.out, *weights_of(trainer.runner.model))


if __name__ == "__main__":
    main()
