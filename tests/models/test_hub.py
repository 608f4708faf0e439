"""`hf://` and `kaggle://` handles wherever a model is loaded, against a loopback stand-in of the Hub."""

import json
import sys
import types

import numpy as np
import pytest
import huggingface_hub
from huggingface_hub import constants

from albert_tf import AlbertBackbone, AlbertClassifier, load_pretrained
from albert_tf.hub import ResolvedModel, parse_hf, resolve, resolve_model
from albert_tf.utils.errors import UserError
from hub_fixtures import ALBERT, SHARDED, TOKEN, assert_matches_transformers, cached_files, hub_env, hub_models, hub_repos, stand_in  # noqa: F401
from hub_stand_in import commit_sha

# The files a load fetches; the repository holds pytorch_model.bin, tokenizer.json and README.md too.
FETCHED = ["config.json", "model.safetensors", "spiece.model", "tokenizer_config.json"]


def test_hf_handle_loads_what_transformers_wrote_fetching_only_what_it_reads(hub_env, stand_in, hub_models):
    resolved = resolve(f"hf://{ALBERT}")

    assert resolved == ResolvedModel(f"hf://{ALBERT}", resolved.path, "hf", ALBERT, None, commit_sha("main"))
    assert_matches_transformers(load_pretrained(f"hf://{ALBERT}"), hub_models["main"])
    downloads = [(method, path) for method, path in stand_in.routes if "/resolve/" in path]
    assert sorted({path.rsplit("/", 1)[1] for _, path in downloads}) == FETCHED, stand_in.routes
    assert {method for method, _ in downloads} == {"HEAD", "GET"}
    print("routes:", *sorted(set(stand_in.routes)), sep="\n  ")


def test_a_task_from_a_hf_handle_tokenizes_as_the_original(hub_env):
    model = AlbertClassifier.from_pretrained(f"hf://{ALBERT}", num_classes=2)

    # No tokenizer_config.json in the repository: transformers' defaults, the original's preprocessing.
    tokenizer = model.preprocessor.tokenizer
    assert tokenizer.preprocessing.lower_case and tokenizer.preprocessing.strip_accents
    assert tokenizer.encode("Café SOCIETY") == tokenizer.encode("cafe society")
    assert model.predict(["a fine film"], verbose=0)["logits"].shape == (1, 2)


def test_a_sharded_repository_downloads_the_index_and_the_shards_it_names(hub_env, stand_in, hub_models, hub_repos):
    resolved = resolve(f"hf://{SHARDED}")

    shards = sorted(n for n in hub_repos[SHARDED].commits[resolved.commit] if n.startswith("model-0"))
    assert len(shards) == 3
    fetched = {path.rsplit("/", 1)[1] for _, path in stand_in.routes if "/resolve/" in path}
    assert sorted(fetched) == sorted(["config.json", "spiece.model", "tokenizer_config.json",
                                      "model.safetensors", "model.safetensors.index.json", *shards])
    assert_matches_transformers(load_pretrained(resolved.path), hub_models["main"])


def test_a_shard_index_naming_a_path_outside_the_repository_is_refused(hub_env, hub_repos, monkeypatch):
    commit = hub_repos[SHARDED].commits[commit_sha("sharded")]
    index = json.loads(commit["model.safetensors.index.json"])
    index["weight_map"] = {name: "../../model-00001-of-00003.safetensors" for name in index["weight_map"]}
    monkeypatch.setitem(commit, "model.safetensors.index.json", json.dumps(index).encode())

    with pytest.raises(UserError, match=r"model.safetensors.index.json: its weight_map names the shard '../../model-00001"):
        resolve(f"hf://{SHARDED}")


def test_a_second_load_downloads_nothing_and_works_offline_with_the_server_stopped(
        hub_env, stand_in, hub_models, monkeypatch):
    first = resolve(f"hf://{ALBERT}")
    stand_in.routes.clear()
    assert resolve(f"hf://{ALBERT}") == first
    # Where main is now (asked once more first, to tell a missing network at once: hub.py's
    # `_check_hub_reachable`), no more.
    assert set(stand_in.routes) == {("HEAD", f"/{ALBERT}/resolve/main/config.json")}
    stand_in.stop()
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)

    assert resolve(f"hf://{ALBERT}") == first
    assert_matches_transformers(AlbertBackbone.from_pretrained(f"hf://{ALBERT}"), hub_models["main"].albert)


@pytest.fixture
def no_retries(monkeypatch):
    """Fails a test in which huggingface_hub waits to retry a request."""
    from huggingface_hub.utils import _http

    def sleep(seconds):
        raise AssertionError(f"huggingface_hub retried after {seconds} s")

    monkeypatch.setattr(_http.time, "sleep", sleep)


def test_an_unreachable_hub_is_one_line_at_the_first_try_naming_what_to_do_offline(
        hub_env, stand_in, no_retries, caplog):
    stand_in.stop()  # the port closed: a connection refused, as with no network
    with pytest.raises(UserError) as e:
        resolve(f"hf://{ALBERT}")

    assert str(e.value) == (f"hf://{ALBERT}: the Hub ({stand_in.endpoint}) cannot be reached ([Errno 111] Connection "
                            f"refused) and {ALBERT} is not in the cache. Offline, set HF_HUB_OFFLINE=1 to load what an "
                            "earlier run downloaded, or pass a local directory (a save_pretrained or albert-tf model "
                            "directory).")
    assert not [r for r in caplog.records if r.name.startswith("huggingface_hub") and r.levelno >= 30]


def test_an_unreachable_hub_loads_from_the_cache_without_retries(hub_env, stand_in, hub_models, no_retries, caplog):
    first = resolve(f"hf://{ALBERT}@v1")
    stand_in.stop()
    huggingface_hub.close_session()  # its kept-alive connection would still reach the stopped server

    assert resolve(f"hf://{ALBERT}@v1") == first
    assert not [r for r in caplog.records if r.name.startswith("huggingface_hub") and r.levelno >= 30]


def test_a_revision_pins_the_commit(hub_env, stand_in, hub_models):
    resolved = resolve(f"hf://{ALBERT}@v1")

    assert (resolved.revision, resolved.commit) == ("v1", commit_sha("v1"))
    # Asked for at the revision named, the rest at the commit it resolved to: no file from main.
    asked = [(method, *path.split("/")[4:6]) for method, path in stand_in.routes if "/resolve/" in path]
    assert asked[0] == ("HEAD", "v1", "config.json"), stand_in.routes
    assert {(revision, name) for method, revision, name in asked if method == "GET"} == {
        ("v1", "config.json"), *((commit_sha("v1"), name) for name in ("model.safetensors", "spiece.model"))}, \
        stand_in.routes
    assert_matches_transformers(load_pretrained(resolved.path), hub_models["v1"])
    assert resolve(f"hf://{ALBERT}@{commit_sha('v1')}").path == resolved.path


def test_the_published_names_resolve_with_and_without_the_org():
    assert parse_hf("hf://albert-base-v2") == ("albert/albert-base-v2", None)
    assert parse_hf("hf://albert/albert-xxlarge-v1@main") == ("albert/albert-xxlarge-v1", "main")
    assert parse_hf("hf://bert-base-uncased") == ("bert-base-uncased", None)  # not renamed: not ALBERT's


@pytest.mark.parametrize("spec", ["ram://models/x", "/tmp/x", "runs/base/final", "gs://bucket/run"])
def test_paths_are_returned_as_they_are(spec):
    assert resolve_model(spec) == spec and resolve(spec).hub is None


@pytest.mark.parametrize("spec, words", [
    ("hf://org/missing", "no repository org/missing"),
    ("hf://org/gated-albert", "is gated"),
    (f"hf://{ALBERT}@v9", "has no revision 'v9'"),
    ("hf://google-bert/bert-base-uncased", "not an ALBERT repository (config.json says model_type 'bert'"),
    ("hf://org/cut-albert", "the download of model.safetensors failed"),
    ("hf://a/b/c", "'a/b/c' is not ORG/NAME"),
    ("hf://org/name@", "nothing follows the @"),
])
def test_each_hub_error_is_one_line_naming_the_handle(spec, words, hub_env):
    with pytest.raises(UserError) as e:
        resolve_model(spec)

    assert str(e.value).startswith(f"{spec}: ") and words in str(e.value) and "\n" not in str(e.value)
    # Nothing half-written: no partial download, no weights, in the cache.
    assert not [f for f in cached_files(hub_env) if "incomplete" in f or f.endswith("model.safetensors")]


@pytest.mark.parametrize("spec, words", [
    ("hf://../etc", "'../etc' is not a Hub repository name"),
    ("hf://a..b/c", "'a..b/c' is not a Hub repository name (Cannot have -- or .."),
    ("hf://albert/albert base", "'albert/albert base' is not a Hub repository name"),
    (f"hf://{ALBERT}@../../../etc", "'../../../etc' is not a branch, tag or commit name"),
    (f"hf://{ALBERT}@main branch", "'main branch' is not a branch, tag or commit name"),
    (f"hf://{ALBERT}@.hidden", "'.hidden' is not a branch, tag or commit name"),
    ("kaggle://keras/../keras/albert_base_en_uncased", "'..' is not a Kaggle name"),
    ("kaggle://keras/albert/keras/albert base/2", "'albert base' is not a Kaggle name"),
    ("kaggle://keras/albert/keras/albert_base_en_uncased/../1", "expected kaggle://OWNER/MODEL"),
    ("kaggle://keras/albert/keras/albert_base_en_uncased/latest", "the version 'latest' is not a number"),
])
def test_a_malformed_name_is_refused_before_any_request(spec, words, hub_env, stand_in, monkeypatch):
    asked = []
    monkeypatch.setitem(sys.modules, "kagglehub", types.SimpleNamespace(model_download=asked.append))
    with pytest.raises(UserError) as e:
        resolve(spec)

    assert str(e.value).startswith(f"{spec}: {words}") and "\n" not in str(e.value), str(e.value)
    assert stand_in.routes == [] and asked == []


def test_a_gated_repository_loads_with_a_token(hub_env, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    assert resolve("hf://org/gated-albert").commit == commit_sha("main")


def test_offline_with_an_empty_cache_says_so(hub_env, monkeypatch):
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(UserError, match=rf"^hf://{ALBERT}: config.json is not in the cache and the Hub cannot be "
                                        "reached"):
        load_pretrained(f"hf://{ALBERT}")


def test_kaggle_handles_download_with_kagglehub(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "kagglehub", None)
    with pytest.raises(UserError, match=r"^kaggle://keras/albert/keras/albert_base_en_uncased: .*"
                                        r"pip install 'albert-tf\[kaggle\]'"):
        resolve("kaggle://keras/albert/keras/albert_base_en_uncased")

    asked = []
    fake = types.SimpleNamespace(model_download=lambda handle: asked.append(handle) or str(tmp_path))
    monkeypatch.setitem(sys.modules, "kagglehub", fake)
    resolved = resolve("kaggle://keras/albert/keras/albert_base_en_uncased/2")
    assert asked == ["keras/albert/keras/albert_base_en_uncased/2"]
    assert (resolved.path, resolved.hub, resolved.revision) == (str(tmp_path), "kaggle", "2")
    with pytest.raises(UserError, match="expected kaggle://OWNER/MODEL/FRAMEWORK/VARIATION"):
        resolve("kaggle://keras/albert")

    # kagglehub's own errors are the user's to fix (one line); any other is a bug and propagates.
    not_found = type("NotFoundError", (Exception,), {"__module__": "kagglehub.exceptions"})
    for error, expected in ((not_found("404 Client Error"), UserError), (RuntimeError("bug"), RuntimeError)):
        def model_download(handle, error=error):
            raise error

        monkeypatch.setattr(fake, "model_download", model_download)
        with pytest.raises(expected, match="kagglehub could not download it .404 Client Error.|bug"):
            resolve("kaggle://keras/albert/keras/albert_base_en_uncased/2")


def test_weights_larger_than_their_model_are_refused_before_they_download(hub_env, stand_in, hub_repos, monkeypatch):
    from safetensors.numpy import load, save

    commit = hub_repos[ALBERT].commits[commit_sha("main")]
    padded = save({**load(commit["model.safetensors"]), "padding": np.zeros(1 << 20, "float32")})
    monkeypatch.setitem(commit, "model.safetensors", padded)
    with pytest.raises(UserError, match=rf"^hf://{ALBERT}: its model.safetensors is {len(padded):,} bytes, more than "
                                        r"the [\d,]+ a weights file of its config.json's model takes in float32; "
                                        r"refused before downloading it\.$"):
        resolve(f"hf://{ALBERT}")
    assert ("GET", f"/{ALBERT}/resolve/{commit_sha('main')}/model.safetensors") not in stand_in.routes
