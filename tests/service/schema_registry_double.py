"""A faithful test double of the Confluent Schema Registry REST API (the subset clients use), in memory.

No Schema-Registry-compatible server can be had from the package registries reachable here (Confluent's registry
is not on Maven Central, Karapace is not on PyPI), so tests run confluent-kafka's real ``SchemaRegistryClient``
against this HTTP server. It follows the documented API (docs.confluent.io, "Schema Registry API reference"):

* ``POST /subjects/{subject}/versions``        register; same schema -> same global id; ``{"id": N}``
* ``POST /subjects/{subject}``                 look up a schema under a subject -> subject, id, version, schema
* ``GET  /schemas/ids/{id}``                   ``{"schema": "..."}`` (+ ``schemaType`` when not AVRO)
* ``GET  /schemas/ids/{id}/versions``          ``[{"subject", "version"}]``
* ``GET  /subjects``, ``GET /subjects/{s}/versions``, ``GET /subjects/{s}/versions/{n|latest}``
* ``DELETE /subjects/{subject}``               soft delete -> list of versions
* ``GET/PUT /config``, ``GET/PUT /config/{subject}``   compatibility level (stored, not enforced)

Errors use the registry's codes: 40401 subject not found, 40402 version not found, 40403 schema not found,
42201 invalid schema, 42202 invalid version, 40408 subject compatibility not configured.
Avro schemas are validated with fastavro and compared in canonical form, as the registry does.
"""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlsplit

__all__ = ["SchemaRegistryDouble"]

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


def _canonical(schema_str: str, schema_type: str) -> str:
    if schema_type != "AVRO":
        return json.dumps(json.loads(schema_str), sort_keys=True, separators=(",", ":"))
    from fastavro import parse_schema
    from fastavro.schema import to_parsing_canonical_form

    return to_parsing_canonical_form(parse_schema(json.loads(schema_str)))


class _Error(Exception):
    def __init__(self, status: int, code: int, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


class SchemaRegistryDouble:
    """``with SchemaRegistryDouble() as sr: sr.url`` - an in-memory registry on a free local port."""

    def __init__(
        self, host: str = "127.0.0.1", port: int = 0, *, tls_certfile: str | None = None, basic_auth: str | None = None
    ) -> None:
        """``tls_certfile``: serve https with this PEM (key + certificate chain); ``basic_auth``: require
        ``user:password`` (401 otherwise), like a secured registry."""
        self._lock = threading.Lock()
        self._tls = tls_certfile is not None
        self.basic_auth = basic_auth
        self.schemas: dict[int, tuple[str, str, str]] = {}  # id -> (schema_str, type, canonical)
        self.by_canonical: dict[tuple[str, str], int] = {}
        self.subjects: dict[str, list[int]] = {}  # subject -> ids by version (index + 1)
        self.deleted: set[str] = set()
        self.config: dict[str | None, str] = {None: "BACKWARD"}
        self.requests: list[tuple[str, str]] = []
        double = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, fmt: str, *args: Any) -> None:  # quiet
                pass

            def _body(self) -> Any:
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n) if n else b""
                if not raw:
                    return None
                try:
                    return json.loads(raw)
                except ValueError:
                    raise _Error(400, 400, "Unrecognized JSON") from None

            def _send(self, status: int, payload: Any) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", CONTENT_TYPE)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _handle(self, method: str) -> None:
                parts = urlsplit(self.path)
                double.requests.append((method, parts.path))
                if double.basic_auth is not None:
                    import base64

                    expected = "Basic " + base64.b64encode(double.basic_auth.encode()).decode()
                    if self.headers.get("Authorization") != expected:
                        self._body()
                        self._send(401, {"error_code": 401, "message": "Unauthorized"})
                        return
                try:
                    body = self._body() if method in ("POST", "PUT") else None
                    status, payload = double._route(method, parts.path, body)
                except _Error as e:
                    status, payload = e.status, {"error_code": e.code, "message": e.message}
                self._send(status, payload)

            def do_GET(self) -> None:
                self._handle("GET")

            def do_POST(self) -> None:
                self._handle("POST")

            def do_PUT(self) -> None:
                self._handle("PUT")

            def do_DELETE(self) -> None:
                self._handle("DELETE")

        self._server = ThreadingHTTPServer((host, port), Handler)
        if tls_certfile is not None:
            import ssl

            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(tls_certfile)
            self._server.socket = ctx.wrap_socket(self._server.socket, server_side=True)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"{'https' if self._tls else 'http'}://{host}:{port}"

    def start(self) -> SchemaRegistryDouble:
        self._thread = threading.Thread(target=self._server.serve_forever, name="schema-registry-double", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> SchemaRegistryDouble:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # ------------------------------------------------------------------------------------------------- routing
    def _register(self, subject: str, body: Any) -> int:
        if not isinstance(body, dict) or not isinstance(body.get("schema"), str):
            raise _Error(422, 42201, "Invalid schema: request body needs a 'schema' string")
        schema_type = (body.get("schemaType") or "AVRO").upper()
        try:
            canonical = _canonical(body["schema"], schema_type)
        except Exception as e:
            raise _Error(422, 42201, f"Invalid schema {body['schema'][:200]}: {e}") from None
        with self._lock:
            sid = self.by_canonical.get((schema_type, canonical))
            if sid is None:
                sid = len(self.schemas) + 1
                self.schemas[sid] = (body["schema"], schema_type, canonical)
                self.by_canonical[(schema_type, canonical)] = sid
            self.deleted.discard(subject)
            versions = self.subjects.setdefault(subject, [])
            if sid not in versions:
                versions.append(sid)
        return sid

    def _subject_versions(self, subject: str) -> list[int]:
        versions = self.subjects.get(subject)
        if not versions or subject in self.deleted:
            raise _Error(404, 40401, f"Subject '{subject}' not found.")
        return versions

    def _version_payload(self, subject: str, version: str) -> dict[str, Any]:
        versions = self._subject_versions(subject)
        if version == "latest" or version == "-1":
            n = len(versions)
        else:
            if not re.fullmatch(r"\d+", version) or int(version) < 1:
                raise _Error(422, 42202, "The specified version is not a valid version id.")
            n = int(version)
            if n > len(versions):
                raise _Error(404, 40402, f"Version {version} not found.")
        sid = versions[n - 1]
        schema_str, schema_type, _ = self.schemas[sid]
        out = {"subject": subject, "version": n, "id": sid, "schema": schema_str}
        if schema_type != "AVRO":
            out["schemaType"] = schema_type
        return out

    def _route(self, method: str, path: str, body: Any) -> tuple[int, Any]:
        segs = [unquote(s) for s in path.strip("/").split("/") if s]
        if method == "GET" and segs == ["subjects"]:
            return 200, sorted(s for s in self.subjects if s not in self.deleted)
        if segs[:1] == ["schemas"] and len(segs) >= 3 and segs[1] == "ids" and method == "GET":
            if not re.fullmatch(r"\d+", segs[2]) or int(segs[2]) not in self.schemas:
                raise _Error(404, 40403, f"Schema {segs[2]} not found")
            sid = int(segs[2])
            schema_str, schema_type, _ = self.schemas[sid]
            if len(segs) == 4 and segs[3] == "versions":
                return 200, [
                    {"subject": s, "version": v.index(sid) + 1}
                    for s, v in self.subjects.items()
                    if sid in v and s not in self.deleted
                ]
            out: dict[str, Any] = {"schema": schema_str}
            if schema_type != "AVRO":
                out["schemaType"] = schema_type
            return 200, out
        if segs[:1] == ["subjects"] and len(segs) >= 2:
            subject = segs[1]
            if len(segs) == 3 and segs[2] == "versions":
                if method == "POST":
                    return 200, {"id": self._register(subject, body)}
                if method == "GET":
                    return 200, list(range(1, len(self._subject_versions(subject)) + 1))
            if len(segs) == 4 and segs[2] == "versions" and method == "GET":
                return 200, self._version_payload(subject, segs[3])
            if len(segs) == 2 and method == "POST":
                versions = self._subject_versions(subject)
                if not isinstance(body, dict) or not isinstance(body.get("schema"), str):
                    raise _Error(422, 42201, "Invalid schema")
                schema_type = (body.get("schemaType") or "AVRO").upper()
                try:
                    canonical = _canonical(body["schema"], schema_type)
                except Exception as e:
                    raise _Error(422, 42201, f"Invalid schema: {e}") from None
                sid = self.by_canonical.get((schema_type, canonical))
                if sid is None or sid not in versions:
                    raise _Error(404, 40403, "Schema not found")
                return 200, self._version_payload(subject, str(versions.index(sid) + 1))
            if len(segs) == 2 and method == "DELETE":
                versions = self._subject_versions(subject)
                self.deleted.add(subject)
                return 200, list(range(1, len(versions) + 1))
        if segs[:1] == ["config"]:
            subject = segs[1] if len(segs) == 2 else None
            if method == "GET":
                if subject is not None and subject not in self.config:
                    raise _Error(
                        404, 40408, f"Subject '{subject}' does not have subject-level compatibility configured"
                    )
                return 200, {"compatibilityLevel": self.config[subject]}
            if method == "PUT":
                level = (body or {}).get("compatibility")
                if level not in (
                    "BACKWARD",
                    "BACKWARD_TRANSITIVE",
                    "FORWARD",
                    "FORWARD_TRANSITIVE",
                    "FULL",
                    "FULL_TRANSITIVE",
                    "NONE",
                ):
                    raise _Error(422, 42203, "Invalid compatibility level")
                self.config[subject] = level
                return 200, {"compatibility": level}
        raise _Error(404, 404, "HTTP 404 Not Found")
