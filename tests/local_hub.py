"""A tiny stand-in for the Hugging Face Hub HTTP API, on 127.0.0.1, for offline upload tests.

It implements exactly what `HfApi(endpoint=...).create_repo` and `.upload_folder` call in huggingface_hub
2.x on the classic (non-Xet) path, i.e. with `huggingface_hub.constants.HF_HUB_DISABLE_XET = True`:

    POST /api/repos/create                          -> {"url": ...}
    POST /api/validate-yaml                         -> {}            (README.md metadata check)
    POST /api/models/<repo>/preupload/<rev>         -> upload mode per file ("lfs" for *.safetensors/*.bin)
    POST /<repo>.git/info/lfs/objects/batch         -> basic transfer: PUT to /lfs-upload/<oid>
    PUT  /lfs-upload/<oid>                          -> stores the blob, checks its sha256
    POST /api/models/<repo>/commit/<rev>            -> ndjson commit: writes the files into `root/<repo>/`

`GET /api/agent-harnesses` (huggingface_hub's best-effort telemetry registry, fetched while building the
user agent) is answered 404 so that nothing gets cached in HF_HOME; anything else is answered 404 and
recorded in `unexpected`. The server handles one request at a time
(HTTP/1.0, no keep-alive) in a daemon thread and stops by itself after `max_requests` requests or
`lifetime_s` seconds, or when the `with` block ends. Loopback only.

`local_hub_endpoint(root)` is the usual entry point: a LocalHub with huggingface_hub pointed at it (what
HF_ENDPOINT does at import time) and hf_xet disabled, both undone afterwards.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest
from huggingface_hub import constants

LFS_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".model", ".spm")
BEST_EFFORT_PATHS = ("/api/agent-harnesses",)  # client telemetry whose failure is silent by design


class LocalHub:
    def __init__(self, root: str | Path, max_requests: int = 200, lifetime_s: float = 120.0):
        self.root = Path(root)
        self.max_requests, self.lifetime_s = max_requests, lifetime_s
        self.repos: dict[str, dict] = {}  # repo_id -> create payload
        self.blobs: dict[str, bytes] = {}  # sha256 -> bytes (LFS uploads)
        self.commits: list[dict] = []  # {"repo_id", "revision", "message", "files": [...]}
        self.requests: list[tuple[str, str]] = []
        self.unexpected: list[tuple[str, str]] = []
        self._server = HTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.timeout = 0.2
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._server.server_port}"

    def repo_dir(self, repo_id: str) -> Path:
        return self.root / repo_id

    # --- lifecycle ------------------------------------------------------------------------------------
    def __enter__(self) -> LocalHub:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._server.server_close()

    def _serve(self) -> None:
        deadline = time.monotonic() + self.lifetime_s
        while not self._stop.is_set() and len(self.requests) < self.max_requests and time.monotonic() < deadline:
            self._server.handle_request()  # returns after one request or `timeout`

    # --- the API --------------------------------------------------------------------------------------
    def _handler_class(self):
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output clean
                pass

            def _body(self) -> bytes:
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    data = b""
                    while True:
                        size = int(self.rfile.readline().strip(), 16)
                        if size == 0:
                            self.rfile.readline()
                            return data
                        data += self.rfile.read(size)
                        self.rfile.readline()
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))

            def _reply(self, status: int, payload: dict) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _route(self, method: str) -> None:
                hub.requests.append((method, self.path))
                body = self._body()
                path = self.path.split("?")[0]
                try:
                    status, payload = hub._dispatch(method, path, body)
                except Exception as error:  # noqa: BLE001  (a malformed request is a test failure, not a hang)
                    status, payload = 400, {"error": f"{type(error).__name__}: {error}"}
                if status == 404 and path not in BEST_EFFORT_PATHS:
                    hub.unexpected.append((method, self.path))
                self._reply(status, payload)

            def do_GET(self):
                self._route("GET")

            def do_POST(self):
                self._route("POST")

            def do_PUT(self):
                self._route("PUT")

        return Handler

    def _dispatch(self, method: str, path: str, body: bytes) -> tuple[int, dict]:
        if method == "POST" and path == "/api/repos/create":
            payload = json.loads(body)
            organization = payload.get("organization")
            repo_id = f"{organization}/{payload['name']}" if organization else payload["name"]
            self.repos[repo_id] = payload
            return 200, {"url": f"{self.endpoint}/{repo_id}", "name": repo_id}
        if method == "POST" and path == "/api/validate-yaml":
            return 200, {}
        if method == "PUT" and path.startswith("/lfs-upload/"):
            oid = path.rsplit("/", 1)[-1]
            if hashlib.sha256(body).hexdigest() != oid:
                return 400, {"error": "sha256 mismatch"}
            self.blobs[oid] = body
            return 200, {}
        if method == "POST" and (match := re.fullmatch(r"/(.+)\.git/info/lfs/objects/batch", path)):
            objects = json.loads(body)["objects"]
            return 200, {
                "transfer": "basic",
                "objects": [
                    {
                        "oid": o["oid"],
                        "size": o["size"],
                        "authenticated": True,
                        "actions": {"upload": {"href": f"{self.endpoint}/lfs-upload/{o['oid']}"}},
                    }
                    for o in objects
                ],
            }
        if method == "POST" and (match := re.fullmatch(r"/api/models/(.+)/(preupload|commit)/([^/]+)", path)):
            repo_id, action, revision = match.groups()
            if repo_id not in self.repos:
                return 404, {"error": f"repository {repo_id} not found"}
            if action == "preupload":
                files = json.loads(body)["files"]
                return 200, {
                    "files": [
                        {
                            "path": f["path"],
                            "shouldIgnore": False,
                            "oid": None,
                            "uploadMode": "lfs" if f["path"].endswith(LFS_SUFFIXES) else "regular",
                        }
                        for f in files
                    ]
                }
            return self._commit(repo_id, revision, body)
        return 404, {"error": f"not implemented in LocalHub: {method} {path}"}

    def _commit(self, repo_id: str, revision: str, body: bytes) -> tuple[int, dict]:
        lines = [json.loads(line) for line in body.decode().splitlines() if line.strip()]
        header = next(line["value"] for line in lines if line["key"] == "header")
        written = []
        for line in lines:
            value = line["value"]
            if line["key"] == "file":
                content = value["content"]
                data = base64.b64decode(content) if value.get("encoding") == "base64" else content.encode()
            elif line["key"] == "lfsFile":
                if value["oid"] not in self.blobs:
                    return 400, {"error": f"LFS object {value['oid']} was never uploaded"}
                data = self.blobs[value["oid"]]
            else:
                continue
            target = self.repo_dir(repo_id) / value["path"]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            written.append(value["path"])
        oid = hashlib.sha1(body).hexdigest()
        self.commits.append(
            {"repo_id": repo_id, "revision": revision, "message": header.get("summary"), "files": written}
        )
        return 200, {"commitUrl": f"{self.endpoint}/{repo_id}/commit/{oid}", "commitOid": oid, "pullRequestUrl": None}


# Run in a fresh interpreter where `import xlpe` fails: argv = (received folder, sentence); prints JSON.
FRESH_PROCESS_SCRIPT = """
import json, sys
sys.modules["xlpe"] = None  # the package is NOT importable here: only the repository's code is
from transformers import pipeline
translator = pipeline("translation", model=sys.argv[1], trust_remote_code=True)
result = translator(sys.argv[2], num_beams=2, max_new_tokens=6)
print(json.dumps({"result": result, "class": type(translator).__name__, "module": type(translator.model).__module__}))
"""


@contextlib.contextmanager
def local_hub_endpoint(root: str | Path, **kwargs):
    """`with local_hub_endpoint(tmp_path) as hub:` HfApi() / push_model(...) now talk to `hub`."""
    with pytest.MonkeyPatch.context() as patch, LocalHub(root, **kwargs) as hub:
        patch.setattr(constants, "HF_HUB_DISABLE_XET", True)  # the classic LFS path; Xet is not served here
        patch.setattr(constants, "ENDPOINT", hub.endpoint)  # HfApi(endpoint=None) reads it at call time
        patch.setenv("HF_TOKEN", "hf_local_test_token")
        yield hub
