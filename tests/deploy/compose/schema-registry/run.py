"""Serve the Schema Registry double on SCHEMA_REGISTRY_LISTENERS (http://HOST:PORT) until SIGTERM."""

import os
import signal
import sys
import threading
from urllib.parse import urlsplit

sys.path.insert(0, os.path.dirname(__file__))
from schema_registry_double import SchemaRegistryDouble

url = urlsplit(os.environ.get("SCHEMA_REGISTRY_LISTENERS", "http://0.0.0.0:8081").split(",")[0])
done = threading.Event()
signal.signal(signal.SIGTERM, lambda *_: done.set())
with SchemaRegistryDouble(url.hostname or "0.0.0.0", url.port or 8081) as registry:
    print(f"schema registry double on {registry.url}", flush=True)
    done.wait()
