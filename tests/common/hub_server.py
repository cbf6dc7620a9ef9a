#!/usr/bin/env python3
"""A local stand-in for the Hugging Face Hub, for tests: serves a folder of repositories with the
Hub's URL layout, headers, errors and storage redirects, on 127.0.0.1 only, and stops by itself.

Layout served: ROOT/{models,datasets}/<org>/<name>/<branch>/<files>. Each branch is one commit whose
hash is derived from its content. Endpoints (as huggingface_hub uses them):

  GET  /api/{models,datasets}/<org>/<name>/revision/<rev>[?blobs=true]   {"sha", "siblings": [...]}
  GET  /api/{models,datasets}/<org>/<name>/tree/<rev>[/<path>]           [{"type", "oid", "size", "path", "lfs"}]
  HEAD|GET /[datasets/]<org>/<name>/resolve/<rev>/<path>
        regular file: 200, ETag "<git blob sha1>", X-Repo-Commit, Content-Length
        LFS file (.safetensors, .parquet, .bin or >= --lfs-size bytes): 302 to the storage server
        (another port, so another origin), X-Linked-Etag "<sha256>", X-Linked-Size, X-Repo-Commit
        missing file: 404 X-Error-Code: EntryNotFound (with X-Repo-Commit); missing revision: 404
        RevisionNotFound; missing or private repository without the token: 401 RepoNotFound
  GET  storage /lfs/<sha256>: Range requests (206), refuses any Authorization header (400)

Fault injection: --fail-halfway PATH=N (the first N storage GETs of that file send half of what was
asked, then drop the connection), --corrupt PATH (storage serves one byte changed), --flaky-api N
(the first N API calls answer 503), --ignore-range (storage ignores Range: a 200 with everything),
--unsafe org/name (its listing adds file names that escape the cache), --rename old/name=new/name
(relative 307 redirects, as for a renamed repository), --private org/name with --token T.

Every request is appended to --log as a JSON line {method, path, range, auth, status}. The two
ports are written to --port-file as "HUB STORAGE" once listening.
"""
import argparse
import hashlib
import json
import os
import socket
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LFS_EXT = (".safetensors", ".parquet", ".bin", ".gguf")
UNSAFE = ["../../../escape.txt", "/etc/vkf-escape", "a/../../b.txt", "ok/./x", "back\\slash"]


def git_sha1(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class Repos:
    def __init__(self, root, lfs_size):
        self.root, self.lfs_size = root, lfs_size
        self.blobs = {}  # sha256 -> (bytes, path)

    def branches(self, kind, repo):
        base = os.path.join(self.root, kind, repo)
        if not os.path.isdir(base):
            return None
        out = {}
        for branch in sorted(os.listdir(base)):
            files = {}
            bdir = os.path.join(base, branch)
            for dirpath, _, names in os.walk(bdir):
                for n in names:
                    full = os.path.join(dirpath, n)
                    rel = os.path.relpath(full, bdir).replace(os.sep, "/")
                    with open(full, "rb") as f:
                        files[rel] = f.read()
            h = hashlib.sha1((kind + repo + branch).encode())
            for rel in sorted(files):
                h.update(rel.encode() + b"\0" + hashlib.sha256(files[rel]).digest())
            out[branch] = (h.hexdigest(), files)
        return out

    def revision(self, kind, repo, rev):
        b = self.branches(kind, repo)
        if b is None:
            return None, None
        if rev in b:
            return b[rev]
        for commit, files in b.values():
            if commit == rev:
                return commit, files
        return "", None

    def is_lfs(self, path, data):
        return path.endswith(LFS_EXT) or len(data) >= self.lfs_size


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("root")
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--log", default=os.devnull)
    ap.add_argument("--token", default="")
    ap.add_argument("--private", action="append", default=[])
    ap.add_argument("--fail-halfway", action="append", default=[])
    ap.add_argument("--corrupt", action="append", default=[])
    ap.add_argument("--flaky-api", type=int, default=0)
    ap.add_argument("--ignore-range", action="store_true")
    ap.add_argument("--unsafe", action="append", default=[])
    ap.add_argument("--rename", action="append", default=[])
    ap.add_argument("--lfs-size", type=int, default=10 << 20)
    ap.add_argument("--max-seconds", type=float, default=600)
    args = ap.parse_args()
    repos = Repos(args.root, args.lfs_size)
    fail_halfway = {k: int(v) for k, v in (x.rsplit("=", 1) for x in args.fail_halfway)}
    renames = dict(x.split("=", 1) for x in args.rename)
    state = {"api_failures": args.flaky_api}
    lock = threading.Lock()
    storage_port = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def log(self, status):
            with lock, open(args.log, "a") as f:
                f.write(json.dumps({"method": self.command, "path": self.path, "range": self.headers.get("Range"),
                                    "auth": self.headers.get("Authorization") is not None, "status": status,
                                    "server": self.server_name}) + "\n")

        def reply(self, status, headers=None, body=b"", send_body=True):
            self.log(status)
            self.send_response(status)
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if send_body and self.command != "HEAD":
                self.wfile.write(body)

        def error(self, status, code, message, extra=None):
            h = {"X-Error-Code": code, "X-Error-Message": message, "Content-Type": "application/json"}
            h.update(extra or {})
            self.reply(status, h, json.dumps({"error": message}).encode())

        def allowed(self, repo):
            if repo not in args.private:
                return True
            return self.headers.get("Authorization") == "Bearer " + args.token

    class HubHandler(Handler):
        server_name = "hub"

        def do_HEAD(self):
            self.route()

        def do_GET(self):
            self.route()

        def route(self):
            url = urllib.parse.urlsplit(self.path)
            parts = [urllib.parse.unquote(p) for p in url.path.split("/")[1:]]
            if parts[:1] == ["api"]:
                return self.api(parts[1:])
            kind = "models"
            if parts[:1] in (["datasets"], ["models"]):
                kind = parts[0]
                parts = parts[1:]
            repo = "/".join(parts[:2])
            if repo in renames:
                target = "/" + ("datasets/" if kind == "datasets" else "") + renames[repo] + "/" + "/".join(
                    urllib.parse.quote(p) for p in parts[2:])
                return self.reply(307, {"Location": target})
            if len(parts) < 5 or parts[2] != "resolve":
                return self.error(404, "NotFound", "no such route")
            return self.resolve(kind, repo, parts[3], "/".join(parts[4:]))

        def api(self, parts):
            if state["api_failures"] > 0:
                state["api_failures"] -= 1
                return self.reply(503, {"Retry-After": "0"}, b"busy")
            if len(parts) >= 5 and parts[0] in ("models", "datasets") and parts[3] == "tree":
                return self.tree(parts[0], "/".join(parts[1:3]), parts[4], "/".join(parts[5:]))
            if len(parts) < 5 or parts[0] not in ("models", "datasets") or parts[3] != "revision":
                return self.error(404, "NotFound", "no such route")
            kind, repo, rev = parts[0], "/".join(parts[1:3]), "/".join(parts[4:])
            if repo in renames:
                return self.reply(307, {"Location": "/api/%s/%s/revision/%s" % (kind, renames[repo], urllib.parse.quote(rev, safe=""))})
            commit, files = repos.revision(kind, repo, rev)
            if commit is None or not self.allowed(repo):
                return self.error(401, "RepoNotFound", "Repository not found")
            if files is None:
                return self.error(404, "RevisionNotFound", "Invalid rev id: " + rev)
            siblings = []
            for path in sorted(files):
                data = files[path]
                s = {"rfilename": path, "size": len(data), "blobId": git_sha1(data)}
                if repos.is_lfs(path, data):
                    s["lfs"] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}
                siblings.append(s)
            if repo in args.unsafe:
                siblings += [{"rfilename": n, "size": 1, "blobId": git_sha1(b"x")} for n in UNSAFE]
            body = json.dumps({"id": repo, "sha": commit, "siblings": siblings}).encode()
            self.reply(200, {"Content-Type": "application/json"}, body)

        def tree(self, kind, repo, rev, prefix):
            # huggingface_hub's snapshot_download lists files here (recursive, one page).
            commit, files = repos.revision(kind, repo, rev)
            if commit is None or not self.allowed(repo):
                return self.error(401, "RepoNotFound", "Repository not found")
            if files is None:
                return self.error(404, "RevisionNotFound", "Invalid rev id: " + rev)
            entries, dirs = [], set()
            for path in sorted(files):
                if prefix and not path.startswith(prefix.rstrip("/") + "/"):
                    continue
                data = files[path]
                parent = path.rsplit("/", 1)[0] if "/" in path else ""
                while parent and parent not in dirs:
                    dirs.add(parent)
                    entries.append({"type": "directory", "oid": git_sha1(parent.encode()), "size": 0, "path": parent})
                    parent = parent.rsplit("/", 1)[0] if "/" in parent else ""
                e = {"type": "file", "oid": git_sha1(data), "size": len(data), "path": path}
                if repos.is_lfs(path, data):
                    e["lfs"] = {"oid": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}
                entries.append(e)
            self.reply(200, {"Content-Type": "application/json"}, json.dumps(entries).encode())

        def resolve(self, kind, repo, rev, path):
            commit, files = repos.revision(kind, repo, rev)
            if commit is None or not self.allowed(repo):
                return self.error(401, "RepoNotFound", "Repository not found")
            if files is None:
                return self.error(404, "RevisionNotFound", "Invalid rev id: " + rev)
            if path not in files:
                return self.error(404, "EntryNotFound", "Entry not found", {"X-Repo-Commit": commit})
            data = files[path]
            if repos.is_lfs(path, data):
                sha = hashlib.sha256(data).hexdigest()
                with lock:
                    repos.blobs[sha] = (data, path, commit)
                pointer = b"version https://git-lfs.github.com/spec/v1\noid sha256:%s\nsize %d\n" % (sha.encode(), len(data))
                loc = "http://127.0.0.1:%d/lfs/%s?name=%s" % (storage_port[0], sha, urllib.parse.quote(path))
                return self.reply(302, {"Location": loc, "X-Repo-Commit": commit, "X-Linked-Etag": '"%s"' % sha,
                                        "X-Linked-Size": str(len(data)), "ETag": '"%s"' % git_sha1(pointer)})
            self.reply(200, {"ETag": '"%s"' % git_sha1(data), "X-Repo-Commit": commit}, data)

    class StorageHandler(Handler):
        server_name = "storage"

        def do_HEAD(self):  # huggingface_hub follows the redirect with HEAD for the size
            self.do_GET()

        def do_GET(self):
            url = urllib.parse.urlsplit(self.path)
            if self.headers.get("Authorization"):
                return self.error(400, "BadRequest", "signed storage URLs must not carry an Authorization header")
            sha = url.path.rsplit("/", 1)[-1]
            with lock:
                entry = repos.blobs.get(sha)
            if entry is None:
                return self.error(404, "NotFound", "no such blob")
            data, path, commit = entry
            if path in args.corrupt:
                data = bytes([data[0] ^ 0xFF]) + data[1:]
            start = 0
            rng = self.headers.get("Range")
            if rng and not args.ignore_range:
                start = int(rng.split("=")[1].split("-")[0])
                if start >= len(data):
                    return self.reply(416, {"Content-Range": "bytes */%d" % len(data)})
            body = data[start:]
            status = 206 if start > 0 else 200
            # The Hub's metadata headers too: a client that follows the redirect reads them here.
            headers = {"Content-Type": "application/octet-stream", "Accept-Ranges": "bytes",
                       "X-Repo-Commit": commit, "ETag": '"%s"' % sha, "X-Linked-Etag": '"%s"' % sha,
                       "X-Linked-Size": str(len(data))}
            if status == 206:
                headers["Content-Range"] = "bytes %d-%d/%d" % (start, len(data) - 1, len(data))
            with lock:
                halfway = self.command == "GET" and fail_halfway.get(path, 0) > 0
                if halfway:
                    fail_halfway[path] -= 1
            if halfway:  # announce the whole body, send half, drop the connection
                self.log(status)
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body[: len(body) // 2])
                self.wfile.flush()
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            self.reply(status, headers, body)

    hub = ThreadingHTTPServer(("127.0.0.1", 0), HubHandler)
    storage = ThreadingHTTPServer(("127.0.0.1", 0), StorageHandler)
    storage_port.append(storage.server_address[1])
    for s in (hub, storage):
        threading.Thread(target=s.serve_forever, daemon=True).start()
    tmp = args.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write("%d %d\n" % (hub.server_address[1], storage.server_address[1]))
    os.replace(tmp, args.port_file)
    time.sleep(args.max_seconds)  # bounded: the server stops by itself
    sys.exit(0)


if __name__ == "__main__":
    main()
