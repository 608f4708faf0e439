"""A loopback stand-in of the HuggingFace Hub's download API, for the `hf://` tests.

huggingface_hub 2.x's `hf_hub_download` calls two routes per file (read in
huggingface_hub/file_download.py: `get_hf_file_metadata`, then `http_get`):

    HEAD /{repo}/resolve/{revision}/{file}   the commit (X-Repo-Commit), ETag, size, or an error
    GET  /{repo}/resolve/{revision}/{file}   the bytes (again with Range: bytes=N- to resume a cut)

and reads errors from the X-Error-Code header (RepoNotFound, GatedRepo,
RevisionNotFound, EntryNotFound; huggingface_hub/utils/_http.py). Once a day
it also asks GET /api/agent-harnesses (huggingface_hub/utils/_detect_agent.py),
which this server answers 404, as a mirror without that route would. The server
answers those for the repositories it is given, logs every (method, path)
it is asked, and can cut a file off halfway. `StandIn.routes` is the log.
"""

import dataclasses
import hashlib
import http.server
import threading
import urllib.parse


@dataclasses.dataclass
class Repo:
    """A repository: commits (sha -> {file name: bytes}), refs (branch or tag -> sha), and access rules."""

    commits: dict
    refs: dict
    token: str | None = None  # a gated repository: answered only with `Authorization: Bearer <token>`
    cut: tuple = ()  # files whose GET stops halfway, as a dropped connection does


def commit_sha(label):
    """A 40-hex commit id made from `label`."""
    return hashlib.sha1(label.encode()).hexdigest()


class StandIn:
    """A threaded HTTP server on 127.0.0.1 (a free port) serving `repos` ({"org/name": Repo})."""

    def __init__(self, repos):
        self.repos = repos
        self.routes = []
        stand_in = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_HEAD(self):
                stand_in._answer(self, body=False)

            def do_GET(self):
                stand_in._answer(self, body=True)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        # `stop` waits for the loop to look again: every 0.5 s by default, idle time in each test that stops one.
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self._thread.start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()

    def _answer(self, request, body):
        path = urllib.parse.urlsplit(request.path).path
        self.routes.append((request.command, path))
        parts = path.lstrip("/").split("/", 4)
        if len(parts) < 5 or parts[2] != "resolve":
            return _reply(request, 404, {"X-Error-Code": "RepoNotFound"})
        repo_id, revision, name = "/".join(parts[:2]), urllib.parse.unquote(parts[3]), parts[4]
        repo = self.repos.get(repo_id)
        if repo is None:
            return _reply(request, 401, {"X-Error-Code": "RepoNotFound"})
        if repo.token is not None and request.headers.get("authorization") != f"Bearer {repo.token}":
            return _reply(request, 401, {"X-Error-Code": "GatedRepo"})
        sha = repo.refs.get(revision, revision)
        if sha not in repo.commits:
            return _reply(request, 404, {"X-Error-Code": "RevisionNotFound"})
        content = repo.commits[sha].get(name)
        if content is None:
            return _reply(request, 404, {"X-Error-Code": "EntryNotFound", "X-Repo-Commit": sha})
        headers = {"X-Repo-Commit": sha, "ETag": f'"{hashlib.sha256(content).hexdigest()}"'}
        if not body:
            return _reply(request, 200, headers, length=len(content))
        if name in repo.cut:
            _reply(request, 200, headers, length=len(content), content=content[: len(content) // 2])
            request.close_connection = True
            return
        _reply(request, 200, headers, length=len(content), content=content)


def _reply(request, status, headers, length=0, content=b""):
    request.send_response(status)
    for key, value in headers.items():
        request.send_header(key, value)
    request.send_header("Content-Length", str(length))
    request.end_headers()
    if content:
        request.wfile.write(content)
