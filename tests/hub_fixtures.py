"""A tiny ALBERT repository that transformers writes, served by `hub_stand_in.StandIn`, and huggingface_hub
pointed at it.

huggingface_hub reads HF_ENDPOINT, HF_HOME and HF_HUB_OFFLINE once, when it is
imported (huggingface_hub.constants), and transformers has imported it before
any test runs. In a test process, `hub_env` therefore sets the module
constants those variables set (the same formulas), which is what
huggingface_hub reads at every call; HF_TOKEN it reads at each call, so that is
set as a variable. The fresh-process test sets the real variables.
"""

import json
import pathlib
import tempfile

import pytest
import transformers

import hf_reference as ref
from hub_stand_in import Repo, StandIn, commit_sha

SPIECE = pathlib.Path(__file__).parent / "fixtures" / "original_tokenizer" / "spiece.model"
# The spiece.model above has 3,000 pieces; the rest is hf_reference's tiny shape.
VOCAB_SIZE = 3000
ALBERT = "org/tiny-albert"
PUBLISHED = "albert/albert-base-v2"  # a tiny model under the published name, for the README's blocks
SHARDED = "org/sharded-albert"
TOKEN = "hf_stand_in_token"


def albert_files(model, **save_options):
    """{file name: bytes} of a repository holding `model` as transformers saves it (`save_options`:
    `max_shard_size`, say), with the tokenizer and the files a download should leave alone (another
    weights format, transformers' tokenizer.json)."""
    files = {}
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp, **save_options)
        for path in pathlib.Path(tmp).iterdir():
            files[path.name] = path.read_bytes()
    files["spiece.model"] = SPIECE.read_bytes()
    files["pytorch_model.bin"] = b"not read: model.safetensors is preferred"
    files["tokenizer.json"] = b"{}"
    files["README.md"] = b"# tiny ALBERT\n"
    return files


@pytest.fixture(scope="session")
def hub_models():
    """The transformers models behind the stand-in's repositories: `ALBERT`'s main and v1, and `PUBLISHED`."""
    return {
        "main": ref.make_hf_model(seed=0, vocab_size=VOCAB_SIZE),
        "v1": ref.make_hf_model(seed=1, vocab_size=VOCAB_SIZE),
        # Standing in for the README's hf://albert/albert-base-v2: as long inputs as finetune's default.
        "published": ref.make_hf_model(seed=2, vocab_size=VOCAB_SIZE, max_position_embeddings=512),
    }


@pytest.fixture(scope="session")
def hub_repos(hub_models):
    """{repo id: Repo}: the ALBERT repository (main, and a tag v1 on an older commit), a gated copy, a copy
    whose weights are cut off halfway, a copy in safetensors shards, a BERT repository, and `PUBLISHED`."""
    main, old = albert_files(hub_models["main"]), albert_files(hub_models["v1"])
    commits = {commit_sha("main"): main, commit_sha("v1"): old}
    bert = {"config.json": json.dumps({"model_type": "bert", "architectures": ["BertModel"]}).encode()}
    published = {commit_sha("published"): albert_files(hub_models["published"])}
    # 3 shards of 100 KB or less, with model.safetensors.index.json naming them.
    sharded = {commit_sha("sharded"): albert_files(hub_models["main"], max_shard_size="100KB")}
    return {
        PUBLISHED: Repo(published, {"main": commit_sha("published")}),
        ALBERT: Repo(commits, {"main": commit_sha("main"), "v1": commit_sha("v1")}),
        "org/gated-albert": Repo({commit_sha("main"): main}, {"main": commit_sha("main")}, token=TOKEN),
        SHARDED: Repo(sharded, {"main": commit_sha("sharded")}),
        "org/cut-albert": Repo({commit_sha("main"): main}, {"main": commit_sha("main")}, cut=("model.safetensors",)),
        "google-bert/bert-base-uncased": Repo({commit_sha("bert"): bert}, {"main": commit_sha("bert")}),
    }


@pytest.fixture
def stand_in(hub_repos):
    """The stand-in, serving `hub_repos` for one test; `stand_in.routes` logs what was asked."""
    server = StandIn(hub_repos)
    yield server
    server.stop()


@pytest.fixture
def hub_env(stand_in, tmp_path, monkeypatch):
    """huggingface_hub pointed at `stand_in`, its cache (HF_HOME) in tmp_path/hf; returns the HF_HOME path."""
    from huggingface_hub import constants

    home = tmp_path / "hf"
    monkeypatch.setattr(constants, "ENDPOINT", stand_in.endpoint)
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", stand_in.endpoint + "/{repo_id}/resolve/{revision}/{filename}")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(home / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(home / "token"))
    # huggingface_hub 2.x also asks the endpoint for /api/agent-harnesses once a day, kept under HF_HOME.
    monkeypatch.setattr(constants, "AGENT_HARNESSES_PATH", str(home / ".agent_harnesses.json"))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HUGGING_FACE_HUB_TOKEN", raising=False)
    return home


def assert_matches_transformers(model, hf_model):
    """`model`'s outputs (and heads, for a pretrainer) equal those of the transformers model within 1e-5."""
    inputs = ref.batch(hf_model.config.vocab_size)
    diffs = ref.max_differences(ref.our_outputs(model, inputs), ref.hf_outputs(hf_model, inputs),
                                inputs["padding_mask"])
    assert max(diffs.values()) < 1e-5, diffs


def cached_files(home):
    """Every file under the cache's blobs/ (what was downloaded), as names relative to `home`."""
    return sorted(str(p.relative_to(home)) for p in pathlib.Path(home).rglob("*") if p.is_file())
