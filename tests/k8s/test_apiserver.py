#!/usr/bin/env python3
"""A test Kubernetes API server for vgpu-node's integration tests (tests/k8s).

HTTPS on 127.0.0.1 with a test CA made at start (openssl), bearer-token authentication, and the
slice of the API that vgpu-node uses, with the semantics it relies on:

  GET   /api/v1/nodes/<name>, /api/v1/namespaces/<ns>/pods/<name>
  GET   /api/v1/pods?fieldSelector=spec.nodeName=<node>      (list; also /api/v1/namespaces/<ns>/pods)
  GET   /api/v1/nodes?watch=1&fieldSelector=metadata.name=<n>&resourceVersion=<rv>&timeoutSeconds=<s>
        (chunked stream of {"type":"MODIFIED","object":...} lines, one per change after <rv>)
  PATCH <object path>  Content-Type application/merge-patch+json (RFC 7386); 409 Conflict when the
        patch carries metadata.resourceVersion and the object has another one
Every write bumps one global resourceVersion, stamped on the object.

The token accepted is the content of <dir>/token, re-read on every request (tests rotate it).

Test control (same authentication), all with PATCH so the plugin's own client can send them:
  PATCH /_test/objects/<object path>   body = the whole object: create or replace it
  PATCH /_test/delete/<object path>    delete it (body ignored)
  PATCH /_test/fail                    {"method": "GET"|"PATCH"|"WATCH"|"", "prefix": "/api/...",
                                        "count": n, "status": 503}  the next n matching calls fail
  GET   /_test/log                     {"requests": ["GET /api/v1/...", ...]}

Usage: test_apiserver.py --dir DIR   writes DIR/ca.crt, DIR/token and, once listening, DIR/port.
"""

import argparse
import copy
import json
import os
import ssl
import subprocess
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Store:
    def __init__(self):
        self.lock = threading.Condition()
        self.objects = {}
        self.version = 1000
        self.changes = []  # (version, path, the object as that version left it)
        self.failures = []
        self.requests = []

    def stamp(self, path, obj):
        self.version += 1
        obj.setdefault("metadata", {})["resourceVersion"] = str(self.version)
        self.objects[path] = obj
        self.changes.append((self.version, path, copy.deepcopy(obj)))
        self.lock.notify_all()

    def injected(self, method, path):
        for failure in self.failures:
            if failure["count"] > 0 and failure["method"] in ("", method) and path.startswith(failure["prefix"]):
                failure["count"] -= 1
                return failure["status"]
        return None


def merge_patch(target, patch):
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def status_body(code, message, reason):
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message,
            "reason": reason, "code": code}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "vgpu-test-apiserver"
    disable_nagle_algorithm = True  # headers and body go out in separate writes

    def log_message(self, fmt, *args):  # quiet
        pass

    # --- plumbing -------------------------------------------------------------------------
    def send_json(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def fail(self, code, message, reason):
        self.send_json(code, status_body(code, message, reason))

    def authorized(self):
        try:
            with open(os.path.join(self.server.dir, "token")) as f:
                token = f.read().strip()
        except OSError:
            token = None
        return token and self.headers.get("Authorization") == "Bearer " + token

    def begin(self, method):
        store = self.server.store
        with store.lock:
            store.requests.append(method + " " + self.path)
            injected = store.injected("WATCH" if "watch=1" in self.path else method, self.path)
        if not self.authorized():
            self.fail(401, "Unauthorized", "Unauthorized")
            return False
        if injected is not None:
            if injected == 0:  # no answer at all
                self.close_connection = True
                self.connection.shutdown(2)
                return False
            self.fail(injected, "injected failure", "InternalError")
            return False
        return True

    def read_body(self):
        length = int(self.headers.get("Content-Length", "0"))
        raw = self.rfile.read(length) if length else b""
        try:
            return json.loads(raw.decode() or "null")
        except ValueError:
            return ValueError

    # --- GET -------------------------------------------------------------------------------
    def do_GET(self):
        if not self.begin("GET"):
            return
        url = urllib.parse.urlsplit(self.path)
        query = dict(urllib.parse.parse_qsl(url.query))
        store = self.server.store
        if url.path == "/_test/log":
            with store.lock:
                self.send_json(200, {"requests": list(store.requests)})
            return
        if query.get("watch") in ("1", "true"):
            self.watch(url.path, query)
            return
        parts = url.path.strip("/").split("/")
        is_list = url.path == "/api/v1/pods" or url.path == "/api/v1/nodes" or (
            len(parts) == 5 and parts[:3] == ["api", "v1", "namespaces"] and parts[4] == "pods")
        with store.lock:
            if is_list:
                items = [copy.deepcopy(o) for p, o in sorted(store.objects.items())
                         if self.matches_list(url.path, p, o, query.get("fieldSelector", ""))]
                kind = "PodList" if "pods" in url.path else "NodeList"
                self.send_json(200, {"kind": kind, "apiVersion": "v1",
                                     "metadata": {"resourceVersion": str(store.version)}, "items": items})
                return
            obj = store.objects.get(url.path)
            if obj is None:
                self.fail(404, url.path + " not found", "NotFound")
                return
            self.send_json(200, obj)

    @staticmethod
    def matches_list(list_path, path, obj, selector):
        if list_path == "/api/v1/nodes":
            if not path.startswith("/api/v1/nodes/"):
                return False
        elif list_path == "/api/v1/pods":
            if "/pods/" not in path:
                return False
        elif not path.startswith(list_path + "/"):
            return False
        for term in filter(None, selector.split(",")):
            field, _, value = term.partition("=")
            node = obj
            for key in field.split("."):
                node = node.get(key) if isinstance(node, dict) else None
            if (node or "") != value:
                return False
        return True

    def watch(self, path, query):
        if path != "/api/v1/nodes":
            self.fail(400, "watch supported on /api/v1/nodes only", "BadRequest")
            return
        selector = query.get("fieldSelector", "")
        name = selector[len("metadata.name="):] if selector.startswith("metadata.name=") else None
        store = self.server.store
        seen = int(query.get("resourceVersion") or store.version)
        deadline = time.monotonic() + int(query.get("timeoutSeconds", "300"))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            while time.monotonic() < deadline and not self.server.stopping:
                events = []
                with store.lock:
                    for version, changed, obj in store.changes:
                        if version <= seen or not changed.startswith("/api/v1/nodes/"):
                            continue
                        if name is not None and changed != "/api/v1/nodes/" + name:
                            continue
                        seen = version
                        # Each event carries the object as its own change left it (as the real API server
                        # does), not the newest state: two quick patches give step 1, then step 2.
                        events.append({"type": "MODIFIED", "object": copy.deepcopy(obj)})
                    if not events:
                        store.lock.wait(0.2)
                for event in events:
                    line = (json.dumps(event) + "\n").encode()
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                    self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError, OSError):
            self.close_connection = True

    # --- PATCH -----------------------------------------------------------------------------
    def do_PATCH(self):
        body = self.read_body()
        if not self.begin("PATCH"):
            return
        store = self.server.store
        url = urllib.parse.urlsplit(self.path)
        if body is ValueError:
            self.fail(400, "the body is not JSON", "BadRequest")
            return
        if url.path == "/_test/fail":
            with store.lock:
                store.failures.append({"method": body.get("method", ""), "prefix": body.get("prefix", "/"),
                                       "count": int(body.get("count", 1)), "status": int(body.get("status", 503))})
            self.send_json(200, {})
            return
        if url.path.startswith("/_test/delete/"):
            with store.lock:
                store.objects.pop(url.path[len("/_test/delete"):], None)
            self.send_json(200, {})
            return
        if url.path.startswith("/_test/objects/"):
            target = url.path[len("/_test/objects"):]
            with store.lock:
                store.stamp(target, copy.deepcopy(body))
                self.send_json(200, store.objects[target])
            return
        if self.headers.get("Content-Type") != "application/merge-patch+json":
            self.fail(415, "unsupported patch type " + str(self.headers.get("Content-Type")), "UnsupportedMediaType")
            return
        if not isinstance(body, dict):
            self.fail(422, "a merge patch must be a JSON object", "Invalid")
            return
        with store.lock:
            obj = store.objects.get(url.path)
            if obj is None:
                self.fail(404, url.path + " not found", "NotFound")
                return
            wanted = (body.get("metadata") or {}).get("resourceVersion")
            if wanted is not None:
                if wanted != obj["metadata"]["resourceVersion"]:
                    self.fail(409, "Operation cannot be fulfilled: the object has been modified; please apply "
                                   "your changes to the latest version and try again", "Conflict")
                    return
                body = copy.deepcopy(body)
                del body["metadata"]["resourceVersion"]
            store.stamp(url.path, merge_patch(obj, body))
            self.send_json(200, store.objects[url.path])


def make_certificates(directory):
    def run(*args):
        subprocess.run(["openssl", *args], cwd=directory, check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    run("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", "/CN=vgpu-test-ca")
    run("req", *ec, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=localhost")
    with open(os.path.join(directory, "san.ext"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    run("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
        "-out", "server.crt", "-days", "2", "-extfile", "san.ext")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", required=True)
    args = parser.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    make_certificates(args.dir)
    token_path = os.path.join(args.dir, "token")
    if not os.path.exists(token_path):
        with open(token_path, "w") as f:
            f.write("token-1\n")

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    server.dir = args.dir
    server.store = Store()
    server.stopping = False
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(os.path.join(args.dir, "server.crt"), os.path.join(args.dir, "server.key"))
    server.socket = context.wrap_socket(server.socket, server_side=True)
    port_path = os.path.join(args.dir, "port")
    with open(port_path + ".tmp", "w") as f:
        f.write(str(server.server_address[1]))
    os.rename(port_path + ".tmp", port_path)
    try:
        server.serve_forever(poll_interval=0.1)
    except KeyboardInterrupt:
        pass
    finally:
        server.stopping = True
    return 0


if __name__ == "__main__":
    sys.exit(main())
