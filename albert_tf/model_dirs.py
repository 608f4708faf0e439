"""Where models and their tokenizers live on disk, for every command and script.

A model directory is a `save_pretrained` directory (config.json,
albert_tf.json, model.weights.h5). Runs hold one: `pretrain` writes
`RUN/final/`, `finetune` writes `RUN/best/`. The tokenizer travels with the
data and the models, always under the one name `TOKENIZER_DIR`:

    data/tokenizer/           create-data: the tokenizer the ids come from
    runs/base/tokenizer/      pretrain: the run's
    runs/base/final/tokenizer/
    runs/sst2/tokenizer/      finetune
    runs/sst2/best/tokenizer/

so a model directory copied on its own still tokenizes, and any of the run
directory, `final/` or `best/` names the same model.

A HuggingFace `save_pretrained` directory of an ALBERT model (config.json
with model.safetensors or pytorch_model.bin, `spiece.model` and
tokenizer_config.json beside them) is a model directory too: `load_pretrained`
converts it on load, and its tokenizer follows its tokenizer_config.json.
So is a keras-hub preset of an AlbertBackbone (config.json with
model.weights.h5 and no albert_tf.json; `albert_tf.keras_hub_preset`), whose
tokenizer is its assets/tokenizer/vocabulary.spm, read as keras-hub reads it.

This module reads file names and tokenizers only: it imports neither Keras
nor the models, so `create-data` and its workers read a tokenizer cheaply.
"""

import dataclasses
import json
import os

from albert_tf.utils import files
from albert_tf.utils.errors import UserError
from albert_tf.utils.layout import BEST_DIR, FINAL_DIR, RUN_MODEL_DIRS, run_dir_of
from input_pipeline import spiece_normalizer
from input_pipeline.tokenizer import CONFIG_FILE as TOKENIZER_JSON
from input_pipeline.tokenizer import MODEL_FILE as SPIECE_FILE
from input_pipeline.tokenizer import AlbertTokenizer, Preprocessing

# albert-tf's own model directories (`save_pretrained`).
CONFIG_FILE = "config.json"  # the `AlbertConfig` (original / HF field names)
MODEL_FILE = "albert_tf.json"  # the Keras config of the whole model
WEIGHTS_FILE = "model.weights.h5"
# What a reader of a model directory (and of its tokenizer/) looks for first:
# `files.move` writes these last where a directory cannot be renamed at once.
ENTRY_FILES = (SPIECE_FILE, CONFIG_FILE, MODEL_FILE)
TOKENIZER_DIR = "tokenizer"

# HuggingFace transformers' `save_pretrained` directories (config.json is shared).
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
SPECIAL_TOKENS_FILE = "special_tokens_map.json"
SAFETENSORS_FILE = "model.safetensors"
TORCH_FILE = "pytorch_model.bin"
INDEX_SUFFIX = ".index.json"
# The HF weight files a model directory may hold, in the order they are
# preferred (safetensors reads without torch); an index names its shards
# (`shard_names`). The loader and the hub download both read this list.
WEIGHT_FILES = (SAFETENSORS_FILE, SAFETENSORS_FILE + INDEX_SUFFIX, TORCH_FILE, TORCH_FILE + INDEX_SUFFIX)

# keras-hub's `save_to_preset` directories (config.json and model.weights.h5 are shared).
KERAS_HUB_ASSETS = "assets"
KERAS_HUB_VOCABULARY = os.path.join(KERAS_HUB_ASSETS, "tokenizer", "vocabulary.spm")
KERAS_HUB_TASK_FILE = "task.json"


def is_index(name):
    """Whether the weight file `name` is a shard index (`model.safetensors.index.json`, say)."""
    return name.endswith(INDEX_SUFFIX)


def shard_names(index_path):
    """The shard files a HF shard index names, sorted: plain names beside the index, as transformers writes them.

    Raises:
        UserError: naming `index_path` when it is no index (invalid JSON, no
            `weight_map` of names), or names a shard outside its directory.
    """
    try:
        weight_map = json.loads(files.read_text(index_path))["weight_map"]
        names = sorted(set(weight_map.values()))
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, AttributeError) as e:
        raise UserError(f"{index_path} is not a valid shard index: {e!r}") from e
    for name in names:
        # Checked on the name, not on where it resolves: huggingface_hub's cache
        # links every snapshot file to a blob outside the snapshot directory.
        if not isinstance(name, str) or name in ("", ".", "..") or "/" in name or "\\" in name:
            raise UserError(f"{index_path}: its weight_map names the shard {name!r}, outside the index's "
                            "directory; shards must be files beside it.")
    return names


# The kinds of model directory `load_pretrained` reads.
ALBERT_TF, HF, KERAS_HUB = "albert-tf", "hf", "keras-hub"


def read_capped(path, config):
    """The bytes of the weights file `path` (read whole: a URL), refused unread when larger than a file
    of `config`'s model (an `AlbertConfig`) can be (`AlbertConfig.file_budget`)."""
    size, budget = files.size(path), config.file_budget()
    if size > budget:
        raise UserError(f"{path} is {size:,} bytes, more than the {budget:,} a weights file of its "
                        "config.json's model takes in float32; refused unread.")
    return files.read_bytes(path)


@dataclasses.dataclass(frozen=True)
class ModelDir:
    """A model directory, classified once from one listing and passed on (a `gs://` probe is a round trip).

    Attributes:
        path: the directory (local path or URL).
        kind: `ALBERT_TF` (config.json beside albert_tf.json), `HF` (config.json
            beside any of `WEIGHT_FILES`, no albert_tf.json) or `KERAS_HUB`
            (config.json beside model.weights.h5, no albert_tf.json). Whether the
            config describes an ALBERT model is checked on load, so that another
            model type is an error naming config.json rather than "no model".
        names: the names its listing holds.
    """

    path: str
    kind: str
    names: frozenset

    @property
    def converts_on_load(self):
        """Whether the model is another library's (HF or keras-hub), converted when loaded."""
        return self.kind != ALBERT_TF


def listing(path):
    """The names in directory `path` (one listing), or None when it is missing or not a directory."""
    try:
        return frozenset(files.listdir(path))
    except (FileNotFoundError, NotADirectoryError):
        return None


def model_kind(names):
    """The kind of model directory whose listing is `names` (see `ModelDir`), or None when it holds none."""
    if CONFIG_FILE not in names:
        return None
    if MODEL_FILE in names:
        return ALBERT_TF
    if any(name in names for name in WEIGHT_FILES):
        return HF
    return KERAS_HUB if WEIGHTS_FILE in names else None


def _model_dir(path, names):
    kind = model_kind(names or ())
    return None if kind is None else ModelDir(os.fspath(path), kind, names)


def keras_hub_tokenizer(directory):
    """The `AlbertTokenizer` of a keras-hub preset's vocabulary.spm: the ids keras-hub's AlbertTokenizer gives.

    keras-hub runs SentencePiece alone on the raw text (its AlbertTokenizer
    is a plain `SentencePieceTokenizer`): no lowercasing or accent stripping
    beyond what the model's own normalizer does. A vocabulary.spm that
    albert-tf wrote carries albert-tf's preprocessing in that normalizer;
    its digit-comma pieces are then re-split as the original ALBERT does.
    """
    proto = files.read_bytes(os.path.join(directory, KERAS_HUB_VOCABULARY))
    preprocessing = Preprocessing(
        collapse_whitespace=False, strip_accents=False, lower_case=False,
        split_digit_comma=spiece_normalizer.carries_preprocessing(proto),
    )
    return AlbertTokenizer(proto, preprocessing)


def _is_hf_tokenizer(names):
    """Whether the tokenizer of a directory listing `names` is a HF one (read by `hf_tokenizer`).

    transformers writes tokenizer_config.json, which albert-tf's tokenizer
    directories never hold; a hub download may lack it, but then sits in a
    HF model directory. Its tokenizer.json, if any, is transformers' own
    format, not albert-tf's.
    """
    return TOKENIZER_CONFIG_FILE in names or model_kind(names) == HF


def find_model_dir(path):
    """`resolve_model_dir(path)`, or None where it finds no model (without raising)."""
    try:
        return resolve_model_dir(path)
    except UserError:
        return None


def resolve_model_dir(path):
    """The `ModelDir` `path` names: itself, or a run's `best/` or `final/`, each classified from one listing.

    A `ModelDir` is returned as it is.

    Raises:
        UserError: naming `path` when it is missing or holds no model.
    """
    if isinstance(path, ModelDir):
        return path
    names = listing(path)
    if names is None:
        if files.isfile(path):
            raise UserError(f"{path}: is a file, expected a model directory (or a run directory holding one).")
        raise UserError(f"{path}: no such directory.")
    model = _model_dir(path, names)
    for sub in RUN_MODEL_DIRS:
        if model is None and sub in names:
            model = _model_dir(os.path.join(path, sub), listing(os.path.join(path, sub)))
    if model is None:
        raise UserError(
            f"{path} holds no model: expected {CONFIG_FILE} and {MODEL_FILE} (albert-tf) or {CONFIG_FILE} "
            f"and {' or '.join(WEIGHT_FILES)} (HuggingFace) or {WEIGHTS_FILE} (keras-hub) there, or an "
            f"albert-tf model in its {BEST_DIR}/ (finetune) or {FINAL_DIR}/ (pretrain) subdirectory."
        )
    return model


def tokenizer_candidates(path):
    """Where a tokenizer for the model or run directory `path` may be, in order.

    The directory itself (a tokenizer or HF directory), its `tokenizer/`, and
    the run's `tokenizer/` when `path` is a run's `final/` or `best/`.
    """
    candidates = [path, os.path.join(path, TOKENIZER_DIR)]
    run_dir = run_dir_of(path)
    if run_dir is not None:
        candidates.append(os.path.join(run_dir, TOKENIZER_DIR))
    return candidates


def find_tokenizer(path, tokenizer_dir=None, required=True):
    """The tokenizer that goes with the model, run or data directory `path`.

    A HF directory's tokenizer (`spiece.model` with its tokenizer_config.json)
    is read as `albert-tf convert --from hf` reads it: `do_lower_case`,
    `keep_accents` and `remove_space` become its preprocessing.

    Args:
        path: a `ModelDir` (its listing is not asked again), a model directory
            (albert-tf or HF), a run directory, or a create-data directory.
        tokenizer_dir: an explicit tokenizer directory (albert-tf or HF); wins when given.
        required: raise when none is found (else return None).

    Returns:
        An `AlbertTokenizer`, or None when not `required` and none is found.
    """
    if tokenizer_dir is not None:
        return load_tokenizer(tokenizer_dir)
    known = {path.path: path.names} if isinstance(path, ModelDir) else {}
    path = os.fspath(path.path if isinstance(path, ModelDir) else path)
    candidates = tokenizer_candidates(path)
    for candidate in candidates:
        names = known[candidate] if candidate in known else listing(candidate)
        tokenizer = _read_tokenizer(candidate, names or frozenset())
        if tokenizer is not None:
            return tokenizer
    if required:
        raise UserError(
            f"No tokenizer for {path}: no {SPIECE_FILE} in {', '.join(candidates)}. Pass --tokenizer DIR "
            f"(a train-tokenizer output, or a HF directory with {SPIECE_FILE}).{_hf_hint(path)}"
        )
    return None


def load_tokenizer(directory):
    """The `AlbertTokenizer` in `directory`: a `train-tokenizer` output, a HF directory or a keras-hub preset.

    Raises:
        UserError: naming `directory` when it holds no `spiece.model`.
    """
    tokenizer = _read_tokenizer(directory, listing(directory) or frozenset())
    if tokenizer is None:
        raise UserError(f"No tokenizer in {directory!r}: {SPIECE_FILE} is missing.{_hf_hint(directory)}")
    return tokenizer


def _read_tokenizer(directory, names):
    """The `AlbertTokenizer` in `directory`, whose listing is `names`; None when it holds none."""
    if KERAS_HUB_ASSETS in names and files.isfile(os.path.join(directory, KERAS_HUB_VOCABULARY)):
        return keras_hub_tokenizer(directory)
    if SPIECE_FILE not in names:
        return None
    if _is_hf_tokenizer(names):
        return hf_tokenizer(directory, names)
    # albert-tf's outputs keep their tokenizer in TOKENIZER_DIR, always with tokenizer.json.
    return AlbertTokenizer.load(directory, require_config=os.path.basename(files.normpath(directory)) == TOKENIZER_DIR)


def _hf_hint(directory):
    """What to do about a HF directory without spiece.model, for error messages; "" for other directories."""
    names = listing(directory) or frozenset()
    if not _is_hf_tokenizer(names):
        return ""
    if TOKENIZER_JSON in names:
        found = f" {directory} has transformers' {TOKENIZER_JSON} only (transformers 5 saves no {SPIECE_FILE});"
    else:
        found = ""
    return (
        f"{found} albert-tf tokenizes with the SentencePiece model: copy {SPIECE_FILE} from where the "
        f"model came from (its hub page has it) into {directory}."
    )


def hf_tokenizer(src_dir, names=None):
    """The `AlbertTokenizer` of a HF directory's spiece.model, or None without one.

    The preprocessing follows tokenizer_config.json (transformers' defaults
    when absent: lowercase, strip accents, collapse whitespace). `names`: the
    directory's listing, when known.
    """
    names = (listing(src_dir) or frozenset()) if names is None else names
    model_path = os.path.join(src_dir, SPIECE_FILE)
    if SPIECE_FILE not in names:
        return None
    options = {}
    config_path = os.path.join(src_dir, TOKENIZER_CONFIG_FILE)
    if TOKENIZER_CONFIG_FILE in names:
        try:
            options = json.loads(files.read_bytes(config_path).decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise UserError(f"{config_path} is not valid UTF-8 JSON: {e}") from e
        if not isinstance(options, dict):
            raise UserError(f"{config_path} must hold a JSON object. Received: {type(options).__name__}")
    # transformers 5 writes `"remove_space": null` (its tokenizer always splits
    # on whitespace): null, like an absent key, takes transformers' default.
    def option(name, default):
        value = options.get(name)
        return default if value is None else bool(value)

    preprocessing = Preprocessing(
        collapse_whitespace=option("remove_space", True),
        strip_accents=not option("keep_accents", False),
        lower_case=option("do_lower_case", True),
    )
    return AlbertTokenizer(files.read_bytes(model_path), preprocessing)
