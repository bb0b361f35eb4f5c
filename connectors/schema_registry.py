"""Schema Registry access through confluent-kafka's client: writer schemas by id, schema registration.

Only the Confluent Schema Registry REST API is used (``GET /schemas/ids/{id}``, ``POST /subjects/{s}/versions``),
through :class:`confluent_kafka.schema_registry.SchemaRegistryClient`, so any compatible server works. Parsed
schemas are cached per process; executors build their own :class:`SchemaRegistry` from the URL.
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Any, cast

from fastavro import parse_schema

__all__ = ["SchemaRegistry", "UnknownSchemaError", "SchemaRegistryUnavailable", "registry_for"]

logger = logging.getLogger(__name__)


class UnknownSchemaError(LookupError):
    """The registry answered that a schema id does not exist (a record problem, not an outage)."""


class SchemaRegistryUnavailable(RuntimeError):
    """The registry could not be asked (network, 5xx): an infrastructure problem, never a bad record."""


class SchemaRegistry:
    """A small cached facade over ``SchemaRegistryClient`` for Avro schemas."""

    def __init__(self, url: str, conf: dict[str, Any] | None = None) -> None:
        from confluent_kafka.schema_registry import SchemaRegistryClient

        self.url = url
        self._client = SchemaRegistryClient({"url": url, **(conf or {})})
        self._parsed: dict[int, Any] = {}
        self._lock = threading.Lock()

    def writer_schema(self, schema_id: int) -> Any:
        """The parsed (fastavro) Avro schema with ``schema_id``; raises :class:`UnknownSchemaError`."""
        parsed = self._parsed.get(schema_id)
        if parsed is not None:
            return parsed
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        try:
            schema = self._client.get_schema(schema_id)
        except SchemaRegistryError as e:
            if e.http_status_code == 404:
                raise UnknownSchemaError(f"schema id {schema_id} is not registered") from None
            raise SchemaRegistryUnavailable(f"schema registry {self.url}: {e}") from e
        except Exception as e:  # connection refused, timeouts
            raise SchemaRegistryUnavailable(f"schema registry {self.url}: {e}") from e
        if schema.schema_type not in (None, "AVRO"):
            raise UnknownSchemaError(f"schema id {schema_id} is a {schema.schema_type} schema, not Avro")
        try:
            # a schema without text (None) fails in json.loads: reported as invalid like any other
            parsed = parse_schema(json.loads(cast(str, schema.schema_str)))
        except Exception as e:
            raise UnknownSchemaError(f"schema id {schema_id} is not a valid Avro schema: {e}") from None
        with self._lock:
            self._parsed[schema_id] = parsed
        return parsed

    def register(self, subject: str, schema: dict[str, Any]) -> int:
        """Register an Avro schema under ``subject`` (idempotent); returns its id."""
        from confluent_kafka.schema_registry import Schema

        schema_id = self._client.register_schema(subject, Schema(json.dumps(schema), "AVRO"))
        with self._lock:
            self._parsed.setdefault(schema_id, parse_schema(schema))
        logger.info("schema registry %s: subject %s -> schema id %d", self.url, subject, schema_id)
        return schema_id

    def close(self) -> None:
        try:
            self._client.close()
        except Exception:  # pragma: no cover
            pass


_REGISTRIES: dict[tuple[str, tuple[tuple[str, str], ...]], SchemaRegistry] = {}
_REGISTRIES_LOCK = threading.Lock()


def registry_for(url: str, conf: tuple[tuple[str, str], ...] = ()) -> SchemaRegistry:
    """One cached :class:`SchemaRegistry` per URL, client settings and process (Python workers reuse it across
    batches). ``conf``: TLS and basic-auth settings of the registry client (:mod:`connectors.security`)."""
    with _REGISTRIES_LOCK:
        reg = _REGISTRIES.get((url, conf))
        if reg is None:
            reg = _REGISTRIES[(url, conf)] = SchemaRegistry(url, dict(conf))
        return reg
