"""A small, real Hugging Face Hub on loopback: the endpoints huggingface_hub 2.x uses to log in, create a repo,
upload over LFS, commit, list and download.

Endpoints (as huggingface_hub calls them; repo type "model" only):

* ``GET  /api/whoami-v2``                                      token -> account, role, fine-grained scopes
* ``POST /api/repos/create``                                   409 when the repo exists
* ``GET  /api/models/<repo>[/revision/<rev>]``                 repo info with the head ``sha``
* ``GET  /api/models/<repo>/tree/<rev>[/<path>]``              files with git blob ids and LFS sha256
* ``POST /api/models/<repo>/preupload/<rev>``                  "lfs" for binary or large files, else "regular"
* ``POST /api/validate-yaml``                                  model card header check
* ``POST /<repo>.git/info/lfs/objects/batch``                  no upload action for objects already stored
* ``PUT  /_lfs/<oid>``, ``POST /_lfs/<oid>/verify``            the "basic" LFS transfer; sha256 checked
* ``PUT  /_lfs/<oid>/part/<n>``, ``POST /_lfs/<oid>/complete``  the Hub's multipart transfer (``multipart_chunk``)
* ``POST /api/models/<repo>/commit/<rev>``                     NDJSON; atomic; ``parentCommit`` enforced
* ``HEAD|GET /<repo>/resolve/<rev>/<path>``                    downloads

Repos live in memory (commits as path -> blob maps), LFS objects and regular blobs as files under ``root``. Write
requests need a token whose role (or fine-grained scope) allows writing to the namespace, like the real Hub.
``lfs_bytes_received`` counts what each LFS object received, so tests can tell what was (not) sent again.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

import yaml

LFS_MIN_BYTES = 10 * 2**20  # the Hub stores files this large as LFS, like binary ones
INITIAL_GITATTRIBUTES = b"*.safetensors filter=lfs diff=lfs merge=lfs -text\n"


@dataclass
class Token:
    user: str
    role: str  # "read" | "write" | "fineGrained"
    scoped_write: tuple[str, ...] = ()  # namespaces a fine-grained token may write
    name: str = "test-token"


@dataclass
class Blob:
    size: int
    git_sha1: str
    sha256: str
    lfs: bool


@dataclass
class Repo:
    owner: str
    private: bool
    commits: list[tuple[str, dict[str, Blob]]] = field(default_factory=list)  # (oid, tree), oldest first

    @property
    def head(self) -> tuple[str, dict[str, Blob]]:
        return self.commits[-1]


class HubServer:
    """``with HubServer(tmp_path, {"hf_w": Token("alice", "write")}) as hub: HfApi(endpoint=hub.url)...``"""

    def __init__(self, root: Path, tokens: dict[str, Token]) -> None:
        self.root = Path(root)
        (self.root / "objects").mkdir(parents=True, exist_ok=True)
        self.tokens = tokens
        self.repos: dict[str, Repo] = {}
        self.lfs_bytes_received: Counter[str] = Counter()  # oid -> bytes of its complete uploads (PUTs)
        self.requests: list[tuple[str, str]] = []
        self.quota_bytes: int | None = None  # LFS objects beyond this total are refused
        self.multipart_chunk: int | None = None  # larger LFS objects are sent in parts of this size
        self.lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="hubserver", daemon=True)

    def __enter__(self) -> HubServer:
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    # -- storage ------------------------------------------------------------------------------------------
    def object_path(self, key: str) -> Path:
        return self.root / "objects" / key

    def has_object(self, key: str) -> bool:
        return self.object_path(key).is_file()

    def stored_bytes(self) -> int:
        return sum(p.stat().st_size for p in (self.root / "objects").iterdir() if p.is_file())

    def put_object(self, key: str, data: bytes) -> None:
        tmp = self.object_path(f".{key}.tmp")
        tmp.write_bytes(data)
        tmp.replace(self.object_path(key))

    def read_file(self, repo_id: str, path: str, revision: str = "main") -> bytes:
        blob = self.resolve(repo_id, revision)[1][path]
        return self.object_path(blob.sha256 if blob.lfs else blob.git_sha1).read_bytes()

    def resolve(self, repo_id: str, revision: str) -> tuple[str, dict[str, Blob]]:
        repo = self.repos[repo_id]
        if revision == "main":
            return repo.head
        for oid, tree in repo.commits:
            if oid == revision:
                return oid, tree
        raise KeyError(revision)

    def commit(self, repo_id: str, tree: dict[str, Blob], summary: str) -> str:
        repo = self.repos[repo_id]
        parent = repo.commits[-1][0] if repo.commits else ""
        listing = json.dumps({p: b.git_sha1 for p, b in sorted(tree.items())})
        oid = hashlib.sha1(f"{parent}\n{summary}\n{listing}".encode()).hexdigest()
        repo.commits.append((oid, tree))
        return oid

    def regular_blob(self, data: bytes) -> Blob:
        sha1 = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
        self.put_object(sha1, data)
        return Blob(len(data), sha1, hashlib.sha256(data).hexdigest(), lfs=False)


def _git_sha1_of_pointer(sha256: str, size: int) -> str:
    pointer = f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()
    return hashlib.sha1(b"blob %d\0" % len(pointer) + pointer).hexdigest()


class _Reply(Exception):
    def __init__(self, status: int, body=None, headers: dict[str, str] | None = None) -> None:
        super().__init__(status)
        self.status, self.body, self.headers = status, body, headers or {}


def _error(status: int, message: str, code: str | None = None) -> _Reply:
    headers = {"X-Error-Message": message}
    if code:
        headers["X-Error-Code"] = code
    return _Reply(status, {"error": message}, headers)


REPO = r"(?P<repo>[^/]+/[^/]+)"
ROUTES = [
    ("GET", r"/api/whoami-v2", "whoami"),
    ("POST", r"/api/repos/create", "create_repo"),
    ("POST", r"/api/validate-yaml", "validate_yaml"),
    ("GET", rf"/api/models/{REPO}(/revision/(?P<rev>[^/]+))?", "repo_info"),
    ("GET", rf"/api/models/{REPO}/tree/(?P<rev>[^/]+)(/(?P<path>.*))?", "tree"),
    ("POST", rf"/api/models/{REPO}/preupload/(?P<rev>[^/]+)", "preupload"),
    ("POST", rf"/api/models/{REPO}/commit/(?P<rev>[^/]+)", "commit"),
    ("POST", rf"/{REPO}\.git/info/lfs/objects/batch", "lfs_batch"),
    ("PUT", r"/_lfs/(?P<oid>[0-9a-f]{64})", "lfs_put"),
    ("POST", r"/_lfs/(?P<oid>[0-9a-f]{64})/verify", "lfs_verify"),
    ("PUT", r"/_lfs/(?P<oid>[0-9a-f]{64})/part/(?P<number>[0-9]+)", "lfs_put_part"),
    ("POST", r"/_lfs/(?P<oid>[0-9a-f]{64})/complete", "lfs_complete"),
    ("GET", rf"/{REPO}/resolve/(?P<rev>[^/]+)/(?P<path>.+)", "download"),
    ("HEAD", rf"/{REPO}/resolve/(?P<rev>[^/]+)/(?P<path>.+)", "download"),
]


def _handler(hub: HubServer):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format, *args) -> None:  # noqa: A002 - quiet tests
            pass

        def do_GET(self) -> None:
            self._dispatch("GET")

        def do_HEAD(self) -> None:
            self._dispatch("HEAD")

        def do_POST(self) -> None:
            self._dispatch("POST")

        def do_PUT(self) -> None:
            self._dispatch("PUT")

        # -- plumbing -------------------------------------------------------------------------------------
        def _dispatch(self, method: str) -> None:
            url = urlsplit(self.path)
            self.query = {k: v[-1] for k, v in parse_qs(url.query).items()}
            with hub.lock:
                hub.requests.append((method, url.path))
            try:
                try:
                    for route_method, pattern, name in ROUTES:
                        match = re.fullmatch(pattern, url.path)
                        if route_method == method and match:
                            params = {k: unquote(v) for k, v in match.groupdict().items() if v is not None}
                            getattr(self, name)(**params)
                            return
                    raise _error(404, f"no route for {method} {url.path}")
                except _Reply as reply:
                    self._send(reply.status, reply.body, reply.headers)
            except ConnectionError:  # the client went away mid-request (a cancelled or cut upload)
                self.close_connection = True

        def _body(self) -> bytes:
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                data = bytearray()
                while True:
                    size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                    if size == 0:
                        self.rfile.readline()
                        return bytes(data)
                    data += self.rfile.read(size)
                    self.rfile.readline()
            return self.rfile.read(int(self.headers.get("Content-Length") or 0))

        def _json(self):
            try:
                return json.loads(self._body() or b"{}")
            except ValueError:
                raise _error(400, "body is not JSON") from None

        def _send(self, status: int, body=None, headers: dict[str, str] | None = None, *, raw: bytes | None = None):
            data = raw if raw is not None else (b"" if body is None else json.dumps(body).encode())
            self.send_response(status)
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            if raw is None:
                self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        def _token(self) -> Token | None:
            auth = self.headers.get("Authorization", "")
            token = hub.tokens.get(auth.removeprefix("Bearer ").strip()) if auth.startswith("Bearer ") else None
            if auth and token is None:
                raise _error(401, "Invalid credentials in Authorization header")
            return token

        def _writer(self, namespace: str) -> Token:
            token = self._token()
            if token is None:
                raise _error(401, "You must be authenticated to write")
            allowed = (token.role == "write" and namespace == token.user) or (
                token.role == "fineGrained" and namespace in token.scoped_write
            )
            if not allowed:
                raise _error(403, f"You don't have the rights to write to {namespace}: this token is read-only")
            return token

        def _repo(self, repo_id: str, *, write: bool = False) -> Repo:
            repo = hub.repos.get(repo_id)
            if write:
                self._writer(repo_id.split("/")[0])
            else:
                token = self._token()
                if repo is not None and repo.private and (token is None or token.user != repo.owner):
                    repo = None
            if repo is None:
                raise _error(404, "Repository not found", "RepoNotFound")
            return repo

        def _resolve(self, repo_id: str, rev: str) -> tuple[str, dict[str, Blob]]:
            try:
                return hub.resolve(repo_id, rev)
            except KeyError:
                raise _error(404, f"Invalid rev id: {rev}", "RevisionNotFound") from None

        # -- endpoints ------------------------------------------------------------------------------------
        def whoami(self) -> None:
            token = self._token()
            if token is None:
                raise _error(401, "Invalid credentials in Authorization header")
            access = {"displayName": token.name, "role": token.role}
            if token.role == "fineGrained":
                access["fineGrained"] = {
                    "canReadGatedRepos": False, "global": ["discussion.write"],
                    "scoped": [
                        {"entity": {"_id": "0", "type": "user", "name": ns},
                         "permissions": ["repo.content.read", "repo.write"]}
                        for ns in token.scoped_write
                    ],
                }
            raise _Reply(200, {"type": "user", "id": "0", "name": token.user, "fullname": token.user.title(),
                               "orgs": [], "auth": {"type": "access_token", "accessToken": access}})

        def create_repo(self) -> None:
            payload = self._json()
            namespace = payload.get("organization") or (self._token().user if self._token() else "")
            self._writer(namespace)
            repo_id = f"{namespace}/{payload['name']}"
            with hub.lock:
                if repo_id in hub.repos:
                    raise _Reply(409, {"error": "You already created this model repo", "url": f"{hub.url}/{repo_id}"})
                private = payload.get("visibility") == "private" or bool(payload.get("private"))
                hub.repos[repo_id] = Repo(owner=namespace, private=private)
                hub.commit(repo_id, {".gitattributes": hub.regular_blob(INITIAL_GITATTRIBUTES)}, "initial commit")
            raise _Reply(200, {"url": f"{hub.url}/{repo_id}", "name": repo_id})

        def validate_yaml(self) -> None:
            content = self._json().get("content", "")
            match = re.match(r"^---\n(.*?)\n---\n", content, re.S)
            try:
                header = yaml.safe_load(match.group(1)) if match else {}
            except yaml.YAMLError as exc:
                raise _Reply(400, {"errors": [{"message": str(exc)}], "warnings": []}) from None
            if not isinstance(header, dict):
                raise _Reply(400, {"errors": [{"message": "metadata must be a mapping"}], "warnings": []})
            raise _Reply(200, {"errors": [], "warnings": []})

        def repo_info(self, repo: str, rev: str = "main") -> None:
            record = self._repo(repo)
            oid, tree = self._resolve(repo, rev)
            raise _Reply(200, {"id": repo, "sha": oid, "private": record.private, "author": record.owner,
                               "siblings": [{"rfilename": path} for path in sorted(tree)]})

        def tree(self, repo: str, rev: str, path: str = "") -> None:
            self._repo(repo)
            _, tree = self._resolve(repo, rev)
            prefix = f"{path.rstrip('/')}/" if path else ""
            recursive = self.query.get("recursive", "").lower() in ("1", "true")
            entries, folders = [], set()
            for name, blob in sorted(tree.items()):
                if not name.startswith(prefix):
                    continue
                rest = name[len(prefix):]
                if "/" in rest and not recursive:
                    folders.add(prefix + rest.split("/")[0])
                    continue
                entry = {"type": "file", "oid": blob.git_sha1, "size": blob.size, "path": name}
                if blob.lfs:
                    entry["lfs"] = {"oid": blob.sha256, "size": blob.size, "pointerSize": 134}
                entries.append(entry)
            entries += [{"type": "directory", "oid": "0" * 40, "size": 0, "path": f} for f in sorted(folders)]
            raise _Reply(200, entries)

        def preupload(self, repo: str, rev: str) -> None:
            record = self._repo(repo, write=True)
            _, tree = self._resolve(repo, rev) if record.commits else ("", {})
            files = []
            for item in self._json().get("files", []):
                sample = base64.b64decode(item.get("sample", ""))
                lfs = item["size"] >= LFS_MIN_BYTES or b"\0" in sample or item["path"].endswith(".safetensors")
                existing = tree.get(item["path"])
                oid = None if existing is None else (existing.sha256 if existing.lfs else existing.git_sha1)
                files.append({"path": item["path"], "uploadMode": "lfs" if lfs else "regular",
                              "shouldIgnore": False, "oid": oid})
            raise _Reply(200, {"files": files})

        def lfs_batch(self, repo: str) -> None:
            self._repo(repo, write=True)
            payload = self._json()
            objects = []
            pending = 0
            for obj in payload.get("objects", []):
                oid, size = obj["oid"], int(obj["size"])
                if hub.has_object(oid):
                    objects.append({"oid": oid, "size": size})  # already stored: nothing to send
                    continue
                pending += size
                if hub.quota_bytes is not None and hub.stored_bytes() + pending > hub.quota_bytes:
                    objects.append({"oid": oid, "size": size,
                                    "error": {"code": 507, "message": "Storage quota exceeded for this account"}})
                    continue
                upload = {"href": f"{hub.url}/_lfs/{oid}", "header": {}}
                if hub.multipart_chunk and size > hub.multipart_chunk:
                    parts = -(-size // hub.multipart_chunk)
                    upload = {"href": f"{hub.url}/_lfs/{oid}/complete", "header": {
                        "chunk_size": str(hub.multipart_chunk),
                        **{str(n): f"{hub.url}/_lfs/{oid}/part/{n}" for n in range(1, parts + 1)},
                    }}
                objects.append({"oid": oid, "size": size, "authenticated": True, "actions": {
                    "upload": upload, "verify": {"href": f"{hub.url}/_lfs/{oid}/verify", "header": {}},
                }})
            raise _Reply(200, {"transfer": "basic", "objects": objects, "hash_algo": "sha256"})

        def lfs_put(self, oid: str) -> None:
            data = self._body()
            if hashlib.sha256(data).hexdigest() != oid:  # also a body cut short by a cancelled upload
                raise _error(400, "content does not match its oid")
            hub.put_object(oid, data)
            with hub.lock:
                hub.lfs_bytes_received[oid] += len(data)
            raise _Reply(200, {})

        def lfs_put_part(self, oid: str, number: str) -> None:
            data = self._body()
            part = hub.object_path(f".parts-{oid}-{int(number):05d}")
            part.write_bytes(data)
            raise _Reply(200, {}, {"ETag": f'"{hashlib.md5(data).hexdigest()}"'})

        def lfs_complete(self, oid: str) -> None:
            payload = self._json()
            data = bytearray()
            for part in sorted(payload.get("parts", []), key=lambda p: p["partNumber"]):
                path = hub.object_path(f".parts-{oid}-{int(part['partNumber']):05d}")
                chunk = path.read_bytes() if path.is_file() else b""
                if f'"{hashlib.md5(chunk).hexdigest()}"' != part["etag"]:
                    raise _error(400, f"part {part['partNumber']} is missing or does not match its etag")
                data += chunk
            if hashlib.sha256(data).hexdigest() != oid:
                raise _error(400, "parts do not add up to the object")
            hub.put_object(oid, bytes(data))
            for path in hub.object_path("").glob(f".parts-{oid}-*"):
                path.unlink()
            with hub.lock:
                hub.lfs_bytes_received[oid] += len(data)
            raise _Reply(200, {})

        def lfs_verify(self, oid: str) -> None:
            payload = self._json()
            if not hub.has_object(oid) or hub.object_path(oid).stat().st_size != payload.get("size"):
                raise _error(404, "object not found")
            raise _Reply(200, {})

        def commit(self, repo: str, rev: str) -> None:
            self._repo(repo, write=True)
            lines = [json.loads(line) for line in self._body().splitlines() if line.strip()]
            header = next((line["value"] for line in lines if line["key"] == "header"), {})
            with hub.lock:
                head, tree = hub.resolve(repo, rev)
                parent = header.get("parentCommit")
                if parent and parent != head:
                    raise _error(412, f"A commit has happened since {parent}; the head is now {head}")
                tree = dict(tree)
                for line in lines:
                    value = line["value"]
                    if line["key"] == "file":
                        tree[value["path"]] = hub.regular_blob(base64.b64decode(value["content"]))
                    elif line["key"] == "lfsFile":
                        if not hub.has_object(value["oid"]):
                            raise _error(422, f"LFS object {value['oid']} of {value['path']} was never uploaded")
                        size = hub.object_path(value["oid"]).stat().st_size
                        tree[value["path"]] = Blob(size, _git_sha1_of_pointer(value["oid"], size), value["oid"], True)
                    elif line["key"] == "deletedFile":
                        tree.pop(value["path"], None)
                oid = hub.commit(repo, tree, header.get("summary", ""))
            raise _Reply(200, {"success": True, "commitOid": oid, "commitUrl": f"{hub.url}/{repo}/commit/{oid}",
                               "pullRequestUrl": None})

        def download(self, repo: str, rev: str, path: str) -> None:
            self._repo(repo)
            oid, tree = self._resolve(repo, rev)
            blob = tree.get(path)
            if blob is None:
                raise _error(404, "Entry not found", "EntryNotFound")
            etag = blob.sha256 if blob.lfs else blob.git_sha1
            data = hub.object_path(etag).read_bytes()
            headers = {"X-Repo-Commit": oid, "ETag": f'"{etag}"', "Content-Type": "application/octet-stream"}
            if blob.lfs:
                headers |= {"X-Linked-Etag": f'"{etag}"', "X-Linked-Size": str(blob.size)}
            self._send(200, headers=headers, raw=data)

    return Handler
