"""The paper's Table 5 intrinsic result at small scale, on real text (IMDB reviews).

Pretrains two identical tiny ALBERTs for the same budget, one on NSP pairs
(B from a random document half the time) and one on SOP pairs (the two
segments swapped half the time), then evaluates each model's sentence head,
as trained, on held-out NSP and SOP examples. The paper (ALBERT-base,
125k steps): the NSP model solves SOP at 52.0% (chance), the SOP model NSP
at 78.9% and SOP at 86.5%.

    python bench/sop_vs_nsp.py --out runs/sop_vs_nsp [--steps 10000] [--write bench/results/sop_vs_nsp.md]

Each run directory is resumable: rerunning continues where it stopped.
"""

import argparse
import dataclasses
import os
import time

from albert_tf import AlbertConfig
from albert_tf.training import Trainer, TrainerConfig, evaluate_pretraining
from input_pipeline.pretraining.dataset import pretraining_dataset_fn

from benchlib.output import emit_table

EVAL_SEED = 12345


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="Directory for the tokenizer and the two runs.")
    parser.add_argument("--steps", type=int, default=10000)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-seq-length", type=int, default=64)
    parser.add_argument("--learning-rate", type=float, default=0.005)
    parser.add_argument("--documents", type=int, default=8000)
    parser.add_argument("--heldout-documents", type=int, default=1000)
    parser.add_argument("--eval-batches", type=int, default=40)
    parser.add_argument("--no-jit-compile", dest="compile_step", action="store_const", const="none",
                        default="forward", help="Run the plain (non-XLA) training step.")
    parser.add_argument("--write", help="Also write the Markdown table to this file.")
    args = parser.parse_args()

    from input_pipeline import AlbertTokenizer, PretrainingDataConfig, TokenizedCorpus, movie_reviews, make_pretraining_dataset

    start = time.perf_counter()
    tokenizer_dir = os.path.join(args.out, "tokenizer")
    documents = movie_reviews.imdb_documents("pretrain", limit=args.documents)
    if os.path.isfile(os.path.join(tokenizer_dir, "spiece.model")):
        tokenizer = AlbertTokenizer.load(tokenizer_dir)
    else:
        tokenizer = AlbertTokenizer.train((s for d in documents[:4000] for s in d), 8000)
        tokenizer.save(tokenizer_dir)
    corpus = TokenizedCorpus.from_documents(documents, tokenizer)
    heldout = TokenizedCorpus.from_documents(
        movie_reviews.imdb_documents("heldout", limit=args.heldout_documents), tokenizer
    )
    model_config = AlbertConfig(
        vocab_size=tokenizer.vocab_size, embedding_size=64, hidden_size=128, num_hidden_layers=4,
        num_attention_heads=4, intermediate_size=512, max_position_embeddings=max(128, args.max_seq_length),
    )
    trainer_config = TrainerConfig(
        global_batch_size=args.batch_size, num_steps=args.steps, learning_rate=args.learning_rate,
        warmup_steps=min(30, args.steps), checkpoint_every=max(1, args.steps // 4), log_every=50,
        compile_step=args.compile_step,
    )

    def data_config(task):
        return PretrainingDataConfig(max_seq_length=args.max_seq_length,
                                     max_predictions_per_seq=max(1, round(args.max_seq_length * 0.15)), task=task)

    results = {}
    for trained_on in ("sop", "nsp"):
        trainer = Trainer(
            model_config, trainer_config, os.path.join(args.out, trained_on),
            pretraining_dataset_fn(corpus, data_config(trained_on)), tokenizer=tokenizer,
            run_info={"data": {"task": trained_on, "config": dataclasses.asdict(data_config(trained_on))}},
        )
        trainer.train()
        for task in ("nsp", "sop"):
            dataset = make_pretraining_dataset(heldout, args.batch_size, seed=EVAL_SEED, config=data_config(task))
            results[trained_on, task] = evaluate_pretraining(trainer.runner.model, dataset, args.eval_batches)

    num_examples = results["sop", "sop"]["num_examples"]
    lines = [
        f"Sentence-pair accuracy of the pretrained head on held-out IMDB reviews ({num_examples} examples "
        f"per cell; chance is the majority-label row). Model: E 64, H 128, 4 layers sharing one block, "
        f"seq {args.max_seq_length}, "
        f"batch {args.batch_size}, {args.steps} LAMB steps at lr {args.learning_rate}; total wall time "
        f"{time.perf_counter() - start:.0f}s on {os.cpu_count()} CPU cores.",
        "",
        "| trained on | NSP accuracy | SOP accuracy | held-out MLM accuracy | paper (NSP / SOP) |",
        "|------------|--------------|--------------|-----------------------|-------------------|",
    ]
    majority = {task: 100 * results["sop", task]["sop_majority_accuracy"] for task in ("nsp", "sop")}
    paper = {"nsp": "90.5 / 52.0", "sop": "78.9 / 86.5"}
    for trained_on in ("nsp", "sop"):
        lines.append(
            f"| {trained_on.upper()} | {100 * results[trained_on, 'nsp']['sop_accuracy']:.1f} | "
            f"{100 * results[trained_on, 'sop']['sop_accuracy']:.1f} | "
            f"{100 * results[trained_on, 'sop']['mlm_accuracy']:.1f} | {paper[trained_on]} |"
        )
    lines.append(
        f"| always the majority label | {majority['nsp']:.1f} | {majority['sop']:.1f} | - | 50 / 50 |"
    )
    table = "\n".join(lines)
    emit_table(table, args.write)


if __name__ == "__main__":
    main()
