"""`ModelServer`: TF-Serving's REST API over HTTP for one `ServingModel`.

    GET  /v1/models/NAME                       version status
    GET  /v1/models/NAME[/versions/V]/metadata signature defs
    POST /v1/models/NAME[/versions/V]:predict  see `codec`
    POST /v1/models/NAME[/versions/V]:classify (a classifier's serve_examples)
    POST /v1/models/NAME[/versions/V]:regress  (a regressor's serve_examples)

Every answer, errors included, is JSON ending in a newline, with an
HTTP/1.x status line; errors are {"error": "one line"}: bad requests (and
request lines it cannot parse) 400, unknown models, versions or paths 404, a
known path with the wrong method 405. A failing request never stops the
server. It serves the version loaded at start (no hot reload, no gRPC:
use TF-Serving for production); `ServingModel` batches concurrent requests
when asked (`batching`).

Uses only the standard library's `http.server` next to TensorFlow.
"""

import json
import re
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from albert_tf.export.serving.codec import RequestError, decode_json

DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024
# Connections the kernel queues before `accept`: socketserver's default of 5
# drops the SYNs of a burst of clients, which then retry only after 1 s.
LISTEN_BACKLOG = 128
_PATH = re.compile(r"^/v1/models/(?P<name>[^/:]+)(?:/versions/(?P<version>\d+))?(?P<rest>/metadata|:\w+)?$")
# Methods each kind of path answers; anything else is 405.
_ALLOWED = {None: "GET", "/metadata": "GET", ":predict": "POST", ":classify": "POST", ":regress": "POST"}


class _Handler(BaseHTTPRequestHandler):
    server_version = "albert-tf-serving"
    timeout = 60  # seconds a client may take to send its request
    # Headers and body go out as separate writes; without TCP_NODELAY, Nagle's
    # algorithm holds the body until the client's delayed ACK (up to 40 ms).
    disable_nagle_algorithm = True

    # The version assumed until the request line names one: http.server's
    # HTTP/0.9 writes no status line, so an error to a line it could not parse
    # (garbage, an over-long line) went out as a bare body.
    default_request_version = "HTTP/1.0"

    def parse_request(self):
        """Refuses, with a 400 status line, a request line that is not `METHOD PATH HTTP/x.y`.

        http.server would take `GET /` as an HTTP/0.9 request: read headers the
        client never sends, then answer with no status line.
        """
        line = str(self.raw_requestline, "iso-8859-1").rstrip("\r\n")
        if len(line.split()) != 3:
            self.command, self.request_version, self.requestline = None, self.default_request_version, line
            self.send_error(HTTPStatus.BAD_REQUEST,
                            f"Malformed request line {line[:100]!r}; expected METHOD PATH HTTP/1.1.")
            return False
        return super().parse_request()

    def log_message(self, fmt, *args):
        if self.server.log_requests:
            super().log_message(fmt, *args)

    def _answer(self, status, body, headers=()):
        data = (json.dumps(body) + "\n").encode("utf-8")  # a body ends its last line, as curl users expect
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def send_error(self, code, message=None, explain=None):
        """The standard library's own errors (bad request line, unknown method, ...) as JSON."""
        if code == HTTPStatus.NOT_IMPLEMENTED:  # a method with no do_* handler
            self._answer(HTTPStatus.METHOD_NOT_ALLOWED,
                         {"error": f"Method {self.command} is not allowed: the REST API uses GET and POST."},
                         [("Allow", "GET, POST")])
            return
        self.close_connection = True
        try:
            self._answer(code, {"error": message or HTTPStatus(code).phrase})
        except (OSError, ValueError):  # the client went away or the status line never parsed
            pass

    def _serve(self, method):
        try:
            self._answer(HTTPStatus.OK, self._dispatch(method))
        except RequestError as e:
            self._answer(e.status, {"error": e.message}, e.headers)
        except Exception as e:  # noqa: BLE001 - a bug must not take the server down
            self._answer(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": f"{type(e).__name__}: {e}"})

    def _dispatch(self, method):
        match = _PATH.match(self.path)
        if not match:
            raise RequestError(f"Malformed request: {method} {self.path}", HTTPStatus.NOT_FOUND)
        rest = match.group("rest")
        if rest not in _ALLOWED:
            raise RequestError(
                f"Malformed request: {method} {self.path} (supported: status, /metadata, :predict, :classify and :regress)",
                HTTPStatus.NOT_FOUND,
            )
        model = self.server.model
        version = match.group("version")
        if match.group("name") != model.name or (version is not None and int(version) != model.version):
            spec = match.group("name") + (f" version {version}" if version else "")
            raise RequestError(
                f"Servable not found for request: {spec} (this server has {model.name} version {model.version})",
                HTTPStatus.NOT_FOUND,
            )
        if method != _ALLOWED[rest]:
            raise RequestError(f"{method} is not allowed on {self.path}; use {_ALLOWED[rest]}.",
                               HTTPStatus.METHOD_NOT_ALLOWED, [("Allow", _ALLOWED[rest])])
        if rest is None:
            return model.status()
        if rest == "/metadata":
            return model.metadata()
        request = decode_json(self._read_body())
        return {":predict": model.predict, ":classify": model.classify, ":regress": model.regress}[rest](request)

    def _read_body(self):
        length = self.headers.get("Content-Length")
        # ASCII digits only: str.isdigit() also takes "²" and other digits int() refuses.
        if length is None or not re.fullmatch(r"[0-9]+", length.strip()):
            self.close_connection = True
            raise RequestError("The request needs a Content-Length header (chunked bodies are not supported).")
        length = int(length)
        if length > self.server.max_body_bytes:
            # Not read: close the connection instead of draining a huge body.
            self.close_connection = True
            raise RequestError(
                f"The request body has {length} bytes; at most {self.server.max_body_bytes} are accepted."
            )
        return self.rfile.read(length)

    def do_GET(self):
        self._serve("GET")

    def do_POST(self):
        self._serve("POST")


class ModelServer(ThreadingHTTPServer):
    """A threaded HTTP server answering TF-Serving REST requests for one `ServingModel`.

    One thread per connection; the SavedModel's functions are thread-safe and
    TensorFlow releases the GIL while they run. `server_address[1]` is the
    bound port (pass port 0 for a free one). Run it with `serve_forever()`
    (blocking) or `start()` (a daemon thread); stop it with `shutdown()` then
    `server_close()`.
    """

    daemon_threads = True
    request_queue_size = LISTEN_BACKLOG

    def __init__(self, model, host="127.0.0.1", port=8501, max_body_bytes=DEFAULT_MAX_BODY_BYTES,
                 log_requests=False):
        self.model = model
        self.max_body_bytes = int(max_body_bytes)
        self.log_requests = log_requests
        super().__init__((host, port), _Handler)

    @property
    def url(self):
        host, port = self.server_address[:2]
        return f"http://{host}:{port}/v1/models/{self.model.name}"

    def start(self):
        thread = threading.Thread(target=self.serve_forever, name="albert-tf-serving", daemon=True)
        thread.start()
        return thread
