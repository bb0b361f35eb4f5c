#!/usr/bin/env python3
"""kafka-broker-api-versions.sh --bootstrap-server HOST:PORT: exit 0 when the broker answers an ApiVersions request
(Kafka protocol, ApiVersions v0) with error code 0; what the compose healthcheck relies on."""
import socket
import struct
import sys

args = sys.argv[1:]
server = args[args.index("--bootstrap-server") + 1].split(",")[0]
host, port = server.rsplit(":", 1)
client_id = b"healthcheck"
body = struct.pack(">hhih", 18, 0, 7, len(client_id)) + client_id
with socket.create_connection((host, int(port)), timeout=8) as s:
    s.sendall(struct.pack(">i", len(body)) + body)
    head = b""
    while len(head) < 10:
        chunk = s.recv(10 - len(head))
        if not chunk:
            sys.exit("connection closed")
        head += chunk
size, correlation, error = struct.unpack(">iih", head)
sys.exit(0 if correlation == 7 and error == 0 else f"ApiVersions error {error}")
