"""What the demo runs (`DemoConfig`) and its defaults, without TensorFlow.

`albert-tf demo` builds its flags from these before TensorFlow loads, so a bad
value is reported at once; `albert_tf.apps.demo` runs them.
"""

import dataclasses

from albert_tf.config import AlbertConfig
from albert_tf.training.config import EMBEDDING_INITS, TrainerConfig
from input_pipeline import PretrainingDataConfig
from albert_tf.utils.config_base import check_choice, check_positive_int, doc
from albert_tf.utils.errors import UserError

# ALBERT's shape (factorized embeddings, one block shared by every layer) at
# a size that pretrains in minutes on 2 CPU cores: E 64, H 128, L 4, 4 heads,
# FFN 512. The vocabulary is ALBERT's own 30,000 pieces: more words are one
# piece, so they get a PPMI-SVD row of their own, and a 126-piece fine-tuning
# window reads more of a text; against 8,000 pieces it fine-tunes better and
# costs 28% more time, the MLM output layer being larger (docs/pretraining.md).
# 128 positions; `demo_config` widens the table for longer examples.
DEMO_MODEL = AlbertConfig(vocab_size=30000, embedding_size=64, hidden_size=128, num_hidden_layers=4,
                          num_attention_heads=4, intermediate_size=512, max_position_embeddings=128)
# Batch 16 x 3,000 steps at a peak rate of 0.005, warmup 2% (60 steps).
# Batch 16 x 3,000 reads the same 48,000 examples as 32 x 1,500 with twice the
# updates: held-out MLM 12.4% against 11.1%, for ~15% lower throughput. MLM
# accuracy first climbs to the unigram level (~4%, always "the") and stays
# there until the model learns to use context; at 0.005 and batch 32 that
# happens after ~250 steps, while 0.02 stayed on that plateau for 300+ steps
# and 0.002 had not reached it by step 400. The SOP head stays at its label
# prior for ~3,000 steps of 32 at this size (bench/sop_vs_nsp.py), beyond a
# few-minute budget.
# The word table learns at a quarter of the rate: at the full rate, batch 16 x
# 3,000 moves it far from its PPMI-SVD start and the model fine-tunes worse;
# with 30,000 pieces a quarter scored best on dev of 0.25 / 0.5 / 1 on both
# fine-tuning tasks (docs/pretraining.md).
# XLA on the forward and backward pass: faster than the plain step on 2 cores,
# as fast as the whole step under XLA, and it keeps the weights of earlier
# versions bit for bit (bench/results/pretrain_throughput.md).
# Precision is left to "auto": float32 for this H 128 model, where bfloat16
# measured slower even on a CPU with bfloat16 units (albert_tf.precision,
# bench/results/pretrain_widths.md);
# with an explicit XLA compile step "auto" stays float32 at any width.
# Checkpoints and progress lines are spaced for a 3,000-step run.
DEMO_TRAINER = TrainerConfig(global_batch_size=16, num_steps=3000, learning_rate=0.005, warmup_fraction=0.02,
                             word_embedding_lr_scale=0.25, compile_step="forward", checkpoint_every=250, log_every=25)
# Short examples (64 pieces, at most 10 of them masked: 15%) keep a step cheap.
DEMO_DATA = PretrainingDataConfig(max_seq_length=64, max_predictions_per_seq=10)


@dataclasses.dataclass(frozen=True)
class DemoConfig:
    """What the demo runs: the library's three configs, and the demo's own data sizes.

    `model`, `trainer` and `data` are an `AlbertConfig`, a `TrainerConfig`
    and a `PretrainingDataConfig` (their fields are documented there). Their
    own defaults are ALBERT-base pretrained as in the paper; the demo's
    (`DEMO_MODEL`, `DEMO_TRAINER`, `DEMO_DATA`, with the reasons beside them)
    fit a few minutes on 2 CPU cores. The tokenizer has `model.vocab_size`
    pieces, and `trainer.seed` also seeds the tokenizer and the data.

    The other fields are the demo's own: which IMDB reviews it reads, how the
    word table starts, and how much the held-out evaluation and the unigram
    baseline look at. Every review by default: the PPMI-SVD vectors need the
    counts (a probe on them scores 72% on Rotten Tomatoes from all 19,928
    reviews, 63% from 6,000), 3,000 steps of 16 x 64 read 3.1 M of their
    6.3 M pieces so none is seen twice, and 30,000 pieces need more than the
    ~26,600 that 4,000 reviews hold.
    """

    model: AlbertConfig = DEMO_MODEL
    trainer: TrainerConfig = DEMO_TRAINER
    data: PretrainingDataConfig = DEMO_DATA
    tokenizer_documents: int = doc(19928, "Pretraining reviews the tokenizer is trained on (30,000 pieces need "
                                   "more than 4,000 reviews).")
    documents: int = doc(19928, "Pretraining reviews (IMDB's pretraining split; 19,928 is all of them).")
    heldout_documents: int = doc(600, "Held-out reviews evaluated at the end (never in pretraining).")
    embedding_init: str = doc("ppmi-svd", "ppmi-svd: start the word embeddings from PPMI-SVD vectors of the "
                              "pretraining text (~5 s here; the one change measured to make a few-minute run "
                              "transfer, docs/pretraining.md); random: ALBERT's initializer.",
                              choices=EMBEDDING_INITS)
    eval_examples: int = doc(640, "Held-out examples evaluated (the same ones whatever the batch size).")
    baseline_batches: int = doc(20, "Training batches counted for the unigram baseline.")

    def __post_init__(self):
        for name, cls in (("model", AlbertConfig), ("trainer", TrainerConfig), ("data", PretrainingDataConfig)):
            if not isinstance(getattr(self, name), cls):
                raise UserError(f"`{name}` must be a {cls.__name__}. Received: {name}={getattr(self, name)!r}")
        for name in ("tokenizer_documents", "documents", "heldout_documents", "eval_examples", "baseline_batches"):
            check_positive_int(name, getattr(self, name))
        check_choice("embedding_init", self.embedding_init, EMBEDDING_INITS)
        if self.data.max_seq_length > self.model.max_position_embeddings:
            raise UserError(
                "`data.max_seq_length` cannot exceed `model.max_position_embeddings`. Received: "
                f"max_seq_length={self.data.max_seq_length}, "
                f"max_position_embeddings={self.model.max_position_embeddings}"
            )

    def own_fields(self):
        """{name: value} of the fields that are the demo's own (not in `model`, `trainer` or `data`)."""
        return {field.name: getattr(self, field.name) for field in dataclasses.fields(self)
                if field.name not in ("model", "trainer", "data")}


def demo_config(model=None, trainer=None, data=None, **fields):
    """A `DemoConfig` whose three configs are the demo's defaults with these changes.

    Args:
        model, trainer, data: {field: value} changes to `DEMO_MODEL`,
            `DEMO_TRAINER` and `DEMO_DATA`. The model's position table grows
            to `data.max_seq_length` when that is longer than its 128.
        **fields: the demo's own fields.
    """
    data = DEMO_DATA.replace(**(data or {}))
    model = {"max_position_embeddings": max(data.max_seq_length, DEMO_MODEL.max_position_embeddings),
             **(model or {})}
    return DemoConfig(DEMO_MODEL.replace(**model), DEMO_TRAINER.replace(**(trainer or {})), data, **fields)
