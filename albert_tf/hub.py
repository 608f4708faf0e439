"""Models named by a hub handle: `hf://ORG/NAME[@REVISION]` and `kaggle://OWNER/MODEL/FRAMEWORK/VARIATION[/VERSION]`.

`resolve_model` turns a handle into a local directory that the loaders read
like any other, and returns every other path (local, gs://, ram://) as it is:

    hf://albert/albert-base-v2           the HuggingFace Hub repository, at main
    hf://albert/albert-base-v2@v1.0      ... at a branch, tag or commit
    hf://albert-base-v2                  the published names without `albert/`
    kaggle://keras/albert/keras/albert_base_en_uncased/2

A HuggingFace repository is downloaded with `huggingface_hub` into its
standard cache, which reads HF_HOME, HF_ENDPOINT, HF_TOKEN and HF_HUB_OFFLINE
itself: a second load downloads nothing, and works offline. Only the files a
load reads are fetched: config.json, spiece.model, tokenizer_config.json where
the repository has one (it sets the preprocessing; the published ALBERT
repositories have none, so transformers' defaults apply: lowercase, no
accents), and the first of the weight files a model directory may hold
(`model_dirs.WEIGHT_FILES`: model.safetensors, its shard index, pytorch_model.bin,
its shard index) that the repository has, with the shards an index names. A cut-off download leaves nothing behind: huggingface_hub
writes a file under a temporary name and moves it into the cache whole.

A Kaggle handle is downloaded with `kagglehub` (the `kaggle` extra) into its
own cache; the directory it gives is read like any local directory.

`resolve` also says what was resolved (`ResolvedModel`): `write_source`
records it in the run files of what is made from the model.
"""

import dataclasses
import json
import os
import re

from albert_tf.model_dirs import CONFIG_FILE, TOKENIZER_CONFIG_FILE, WEIGHT_FILES, is_index, shard_names
from albert_tf.utils import files
from albert_tf.utils.errors import UserError
from input_pipeline.tokenizer import MODEL_FILE as SPIECE_FILE

HF_SCHEME = "hf://"
KAGGLE_SCHEME = "kaggle://"
# The published ALBERT repositories, once top-level names: the Hub redirects
# those to `albert/`; naming the repository directly keeps one cache for both spellings.
PUBLISHED = tuple(f"albert-{size}-v{v}" for v in (1, 2) for size in ("base", "large", "xlarge", "xxlarge"))
PUBLISHED_ORG = "albert"
# Where a run records the hub model it was made from.
SOURCE_FILE = "model_source.json"


@dataclasses.dataclass(frozen=True)
class ResolvedModel:
    """What a model argument named, and the local directory it resolved to.

    Attributes:
        spec: the argument as given (`hf://...`, `kaggle://...` or a path).
        path: the local directory to load (`spec` itself for a path).
        hub: "hf", "kaggle", or None for a path.
        repo: the repository ("albert/albert-base-v2") or Kaggle handle; None for a path.
        revision: the revision asked for (None: the default branch, or the latest Kaggle version).
        commit: the commit the revision resolved to (HF only; None otherwise).
    """

    spec: str
    path: str
    hub: str | None = None
    repo: str | None = None
    revision: str | None = None
    commit: str | None = None

    def to_dict(self):
        """The record `write_source` writes (JSON-ready): what identifies the model, not where this machine
        keeps it (the cache's path names its home directory, and the record travels with what is shared)."""
        return {"model": self.spec, "hub": self.hub, "repo": self.repo, "revision": self.revision,
                "commit": self.commit}


def is_hub_spec(spec):
    """Whether `spec` is a hub handle (`hf://` or `kaggle://`) rather than a path."""
    return isinstance(spec, str) and spec.startswith((HF_SCHEME, KAGGLE_SCHEME))


def resolve_model(spec):
    """The local directory `spec` names: a hub handle downloaded (see `resolve`), any other path as it is."""
    return resolve(spec).path


def resolve(spec):
    """`spec` resolved to a local directory, with what it was resolved from.

    Args:
        spec: `hf://ORG/NAME[@REVISION]`, `hf://NAME` for the published
            ALBERT names, `kaggle://OWNER/MODEL/FRAMEWORK/VARIATION[/VERSION]`,
            or any path (returned unchanged; a `pathlib.Path` as a string).

    Returns:
        A `ResolvedModel`.

    Raises:
        UserError: one line naming `spec`: a malformed handle, a repository or
            revision that does not exist, a gated or private repository without
            a token, nothing cached while offline, a repository that is not
            ALBERT, a download cut off, kagglehub not installed.
    """
    spec = os.fspath(spec)
    if spec.startswith(HF_SCHEME):
        return _resolve_hf(spec)
    if spec.startswith(KAGGLE_SCHEME):
        return _resolve_kaggle(spec)
    return ResolvedModel(spec, spec)


def write_source(resolved, directory):
    """Records `resolved` as `directory/SOURCE_FILE` when it came from a hub; a path records nothing."""
    if resolved.hub is not None:
        files.write_text(os.path.join(directory, SOURCE_FILE), json.dumps(resolved.to_dict(), indent=2) + "\n")


def parse_hf(spec):
    """(repo, revision or None) of `hf://ORG/NAME[@REVISION]`; UserError naming `spec` when malformed.

    Checked before any request, by huggingface_hub's rules for repository
    ids and git's for revisions: offline, huggingface_hub reads the cache's
    `refs/REVISION` file as named, so a revision must not be a path out of it.
    """
    repo, at, revision = spec[len(HF_SCHEME):].partition("@")
    if repo in PUBLISHED:
        repo = f"{PUBLISHED_ORG}/{repo}"
    parts = repo.split("/")
    if len(parts) > 2 or not all(parts):
        raise UserError(
            f"{spec}: expected hf://ORG/NAME or hf://ORG/NAME@REVISION (e.g. hf://albert/albert-base-v2); "
            f"{repo!r} is not ORG/NAME."
        )
    if at and not revision:
        raise UserError(f"{spec}: nothing follows the @; name a branch, tag or commit (hf://ORG/NAME@main), "
                        "or leave out the @ for the main branch.")
    _check_repo_id(spec, repo)
    if revision:
        _check_revision(spec, revision)
    return repo, revision or None


def _check_repo_id(spec, repo):
    """UserError naming `spec` when `repo` breaks huggingface_hub's repository-id rules (`validate_repo_id`)."""
    # Imported on use, as in `_HFFetch`: the command line's start-up does not need huggingface_hub.
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(repo)
    except HFValidationError as e:
        raise UserError(f"{spec}: {repo!r} is not a Hub repository name ({str(e).splitlines()[0]})") from None


# Git's rules for a ref name (git check-ref-format), which the Hub's branches and tags follow.
_REVISION_FORBIDDEN = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]|\.\.|@\{|//")


def _check_revision(spec, revision):
    """UserError naming `spec` when `revision` cannot be a branch, tag or commit (git's ref-name rules)."""
    if (_REVISION_FORBIDDEN.search(revision) or revision.startswith("/") or revision.endswith(("/", ".", ".lock"))
            or any(part.startswith(".") for part in revision.split("/")) or revision == "@"):
        raise UserError(f"{spec}: {revision!r} is not a branch, tag or commit name (git refuses spaces, '..', "
                        "a leading '/' or '.', and ~^:?*[\\ in one); name one of the repository's revisions.")


def _resolve_hf(spec):
    repo, revision = parse_hf(spec)
    fetch = _HFFetch(spec, repo, revision)
    _check_hub_reachable(fetch)
    # config.json first: a repository of another model is refused before its weights download.
    config_path = fetch(CONFIG_FILE)
    snapshot = os.path.dirname(config_path)
    _check_albert(spec, config_path)
    # Imported on use: numpy and safetensors, which the command line's start-up does not need.
    from albert_tf.hf_checkpoint import read_config

    # No weights file of this model is larger: one that is is refused before it downloads.
    budget = read_config(snapshot)[0].file_budget()
    # The rest from the same commit, even if the branch moves meanwhile.
    fetch.revision = commit = os.path.basename(snapshot)
    fetch(SPIECE_FILE)
    fetch(TOKENIZER_CONFIG_FILE, optional=True)
    for name in WEIGHT_FILES:
        path = fetch(name, optional=True, max_bytes=None if is_index(name) else budget)
        if path is not None:
            for shard in shard_names(path) if is_index(name) else ():
                fetch(shard, max_bytes=budget)
            break
    else:
        raise UserError(
            f"{spec}: {repo} has no weights albert-tf reads ({' or '.join(WEIGHT_FILES)}); "
            "only tf_model.h5 or flax weights, say? Convert them with transformers first."
        )
    return ResolvedModel(spec, snapshot, "hf", repo, revision, commit)


class _HFFetch:
    """Downloads one file of a repository into huggingface_hub's cache, each failure a one-line UserError."""

    def __init__(self, spec, repo, revision):
        self.spec, self.repo, self.revision = spec, repo, revision
        self.local_only = False  # the cache alone (`_check_hub_reachable` found the Hub unreachable)

    def __call__(self, name, optional=False, max_bytes=None):
        """The cached path of `name`; None for an `optional` file the repository (or, offline, the cache) lacks.

        `max_bytes`: a file not yet cached that the Hub says is larger is refused before it downloads.
        """
        # Imported on use: huggingface_hub loads an HTTP client (60 ms) that the
        # command line's start-up, which imports this module, does not need.
        import huggingface_hub
        from huggingface_hub import errors as hub_errors

        spec, repo = self.spec, self.repo
        if optional:
            cached = huggingface_hub.try_to_load_from_cache(repo, name, revision=self.revision)
            if cached is not None and not isinstance(cached, str):
                return None  # known absent at this revision (the cache notes that): not asked again
        try:
            if max_bytes is not None and not self.local_only and not huggingface_hub.constants.HF_HUB_OFFLINE:
                self._check_size(name, max_bytes)
            return huggingface_hub.hf_hub_download(repo, name, revision=self.revision,
                                                   local_files_only=self.local_only)
        except hub_errors.GatedRepoError:
            raise UserError(
                f"{spec}: {repo} is gated. Accept its terms on its Hub page, then set HF_TOKEN to a token "
                "of that account (or run `hf auth login`)."
            ) from None
        except hub_errors.RepositoryNotFoundError:
            raise UserError(
                f"{spec}: no repository {repo} on the Hub, or it is private and HF_TOKEN does not grant it. "
                "Check the name (e.g. hf://albert/albert-base-v2), or set HF_TOKEN."
            ) from None
        except hub_errors.RevisionNotFoundError:
            raise UserError(
                f"{spec}: {repo} has no revision {self.revision!r}. Name one of its branches, tags or "
                "commits, or leave out @REVISION for its main branch."
            ) from None
        except hub_errors.EntryNotFoundError as e:
            # Remote: the repository lacks the file. Local (offline, or the Hub unreachable): the cache lacks it.
            if optional:
                return None
            if isinstance(e, hub_errors.LocalEntryNotFoundError):
                raise UserError(
                    f"{spec}: {name} is not in the cache and the Hub cannot be reached (offline: "
                    "HF_HUB_OFFLINE, or no network). Load it once with the network on, or unset HF_HUB_OFFLINE."
                ) from None
            raise UserError(f"{spec}: {repo} has no {name}; is it an ALBERT model repository?") from None
        except Exception as e:
            # A connection dropped mid-file (after huggingface_hub's five tries to resume it), a size
            # that does not match, a server error: huggingface_hub's HTTP errors, OSErrors, and the
            # transport errors of its HTTP client (httpx2). Nothing partial is kept: huggingface_hub
            # moves a file into the cache only once it is whole. Any other exception is a bug.
            if not isinstance(e, (hub_errors.HfHubHTTPError, OSError)) and not type(e).__module__.startswith("httpx"):
                raise
            reason = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise UserError(
                f"{spec}: the download of {name} failed ({reason}); nothing partial was kept. Run it again."
            ) from None


    def _check_size(self, name, max_bytes):
        """UserError naming the handle when `name`, not yet cached, is larger than `max_bytes` on the Hub."""
        import huggingface_hub

        if isinstance(huggingface_hub.try_to_load_from_cache(self.repo, name, revision=self.revision), str):
            return
        url = huggingface_hub.hf_hub_url(self.repo, name, revision=self.revision)
        size = huggingface_hub.get_hf_file_metadata(url).size
        if size is not None and size > max_bytes:
            raise UserError(f"{self.spec}: its {name} is {size:,} bytes, more than the {max_bytes:,} a weights file "
                            f"of its {CONFIG_FILE}'s model takes in float32; refused before downloading it.")


def _check_hub_reachable(fetch):
    """Asks the Hub once, without retries, whether it answers; unreachable, `fetch` reads the cache alone.

    huggingface_hub's `hf_hub_download` retries a connection that fails five
    times over 23 seconds, a warning on stderr each time, before it looks in
    the cache. One HEAD of config.json first (no retries: `get_hf_file_metadata`'s
    default) tells a missing network from everything else within the
    request timeout; every other answer, an error included, is left to
    `fetch`, which asks again (its HEAD writes the cache's refs/REVISION,
    which an offline load by branch name reads) and says what it was.

    Raises:
        UserError: the Hub unreachable and config.json not in the cache: what
            to do offline (HF_HUB_OFFLINE=1, or a local directory).
    """
    import httpx2
    import huggingface_hub
    from huggingface_hub import constants, errors as hub_errors

    if constants.HF_HUB_OFFLINE:
        return  # huggingface_hub asks nothing, and says so itself
    try:
        huggingface_hub.get_hf_file_metadata(huggingface_hub.hf_hub_url(fetch.repo, CONFIG_FILE,
                                                                         revision=fetch.revision))
        return
    except (httpx2.ConnectError, httpx2.TimeoutException) as e:
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
    except (hub_errors.HfHubHTTPError, OSError, ValueError):
        return  # the Hub answered: `fetch` asks again and reports it
    fetch.local_only = True
    if huggingface_hub.try_to_load_from_cache(fetch.repo, CONFIG_FILE, revision=fetch.revision) is None:
        raise UserError(
            f"{fetch.spec}: the Hub ({constants.ENDPOINT}) cannot be reached ({reason}) and {fetch.repo} is not in "
            "the cache. Offline, set HF_HUB_OFFLINE=1 to load what an earlier run downloaded, or pass a local "
            "directory (a save_pretrained or albert-tf model directory)."
        )


def _check_albert(spec, config_path):
    """UserError naming `spec` when config.json describes another model type (a BERT repository, say)."""
    try:
        values = json.loads(files.read_text(config_path))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise UserError(f"{spec}: its {CONFIG_FILE} is not valid JSON: {e}") from None
    model_type = values.get("model_type") if isinstance(values, dict) else None
    if model_type != "albert":
        raise UserError(
            f"{spec}: not an ALBERT repository ({CONFIG_FILE} says model_type {model_type!r}, not 'albert'). "
            "Name an ALBERT model, e.g. hf://albert/albert-base-v2."
        )


def _resolve_kaggle(spec):
    handle = spec[len(KAGGLE_SCHEME):]
    parts = handle.split("/")
    _check_kaggle_handle(spec, parts)
    try:
        import kagglehub
    except ImportError:
        raise UserError(
            f"{spec}: kaggle:// handles download with kagglehub, which is not installed: "
            "pip install 'albert-tf[kaggle]'."
        ) from None
    try:
        path = kagglehub.model_download(handle)
    except Exception as e:
        # The user's to fix: kagglehub's own errors (credentials, a handle not found, the backend),
        # requests' (OSErrors) and a malformed handle (ValueError). Anything else is a bug.
        if not isinstance(e, (OSError, ValueError)) and not type(e).__module__.startswith("kagglehub"):
            raise
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise UserError(f"{spec}: kagglehub could not download it ({reason}).") from None
    return ResolvedModel(spec, str(path), "kaggle", handle, parts[4] if len(parts) == 5 else None)


# A Kaggle slug: letters, digits, '-', '_' and '.', not starting with '.' or '-' (kagglehub joins the
# parts into its cache's paths as they are).
_KAGGLE_PART = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


def _check_kaggle_handle(spec, parts):
    """UserError naming `spec` unless `parts` are OWNER/MODEL/FRAMEWORK/VARIATION[/VERSION], each a slug."""
    if len(parts) not in (4, 5) or not all(parts):
        raise UserError(
            f"{spec}: expected kaggle://OWNER/MODEL/FRAMEWORK/VARIATION[/VERSION] "
            "(e.g. kaggle://keras/albert/keras/albert_base_en_uncased/2)."
        )
    bad = [part for part in parts[:4] if not _KAGGLE_PART.fullmatch(part) or ".." in part]
    if bad:
        raise UserError(f"{spec}: {bad[0]!r} is not a Kaggle name (letters, digits, '-', '_' and '.', no '..'); "
                        "e.g. kaggle://keras/albert/keras/albert_base_en_uncased/2.")
    if len(parts) == 5 and not parts[4].isdigit():
        raise UserError(f"{spec}: the version {parts[4]!r} is not a number; e.g. "
                        "kaggle://keras/albert/keras/albert_base_en_uncased/2, or leave it out for the latest.")
