"""Avro in the Schema Registry wire format: ``0x00`` + 4-byte big-endian schema id + Avro binary body."""

from __future__ import annotations

import io
import struct
from typing import Any

from fastavro import schemaless_reader, schemaless_writer

__all__ = ["MAGIC", "WireFormatError", "split_wire", "frame", "encode", "decode_body", "HEADER"]

MAGIC = 0
HEADER = struct.Struct(">bI")


class WireFormatError(ValueError):
    """Bytes that are not in the Schema Registry wire format."""


def split_wire(data: bytes) -> tuple[int, memoryview]:
    """``(schema_id, body)`` of a wire-format message."""
    if len(data) < HEADER.size:
        raise WireFormatError(f"{len(data)} bytes is too short for the Schema Registry wire format")
    magic, schema_id = HEADER.unpack_from(data)
    if magic != MAGIC:
        raise WireFormatError(f"unknown magic byte {magic} (expected 0)")
    return schema_id, memoryview(data)[HEADER.size :]


def frame(schema_id: int) -> bytes:
    """The 5-byte wire-format header for ``schema_id``."""
    return HEADER.pack(MAGIC, schema_id)


def encode(schema_id: int, parsed_schema: Any, record: Any) -> bytes:
    """One record in the wire format."""
    buf = io.BytesIO()
    buf.write(HEADER.pack(MAGIC, schema_id))
    schemaless_writer(buf, parsed_schema, record)
    return buf.getvalue()


def decode_body(body: bytes | memoryview, writer_schema: Any) -> Any:
    """Decode an Avro body (no header) written with ``writer_schema``. Raises on any corruption, including
    trailing bytes."""
    buf = io.BytesIO(body)
    record = schemaless_reader(buf, writer_schema, None)
    if buf.tell() != len(body):
        raise ValueError(f"{len(body) - buf.tell()} trailing bytes after the Avro record")
    return record
