"""Build-stage only: remove what the service never loads from the installed pyspark (measured: pyspark is 489 MB of
the 1.41 GB image, 462 MB of it jars).

* Jars of Spark components the service does not run: MLlib and its numerics (breeze, spire, cats, BLAS/LAPACK),
  Hive (the session uses the in-memory catalog; spark.sql.catalogImplementation stays in-memory), the Kubernetes
  scheduler, the Spark Connect server. A local[*] or spark:// master with the RocksDB state store and the Kafka
  connector needs none of them (tests/deploy/test_image.py runs the image).
* RocksDB's JNI jar carries the native library of every platform (69 MB); only this machine's stays.
* pyspark's examples and data folders.

    python deploy/docker/prune_pyspark.py /opt/venv/lib/python3.11/site-packages/pyspark
"""

from __future__ import annotations

import platform
import shutil
import sys
import zipfile
from pathlib import Path

UNUSED_JARS = (
    "spark-mllib",
    "breeze",
    "spire",
    "cats-kernel",
    "arpack",
    "blas",
    "lapack",
    "jtransforms",
    "hive-",
    "spark-hive",
    "derby",
    "datanucleus",
    "kubernetes-",
    "spark-kubernetes",
    "spark-connect_",
    "jpam",
    "libthrift",
    "libfb303",
)
ROCKSDB_NATIVE = {"x86_64": "librocksdbjni-linux64.so", "aarch64": "librocksdbjni-linux-aarch64.so"}


def slim_rocksdb(jar: Path) -> int:
    keep = ROCKSDB_NATIVE.get(platform.machine())
    if keep is None:
        return 0
    before = jar.stat().st_size
    tmp = jar.with_suffix(".tmp")
    with zipfile.ZipFile(jar) as src, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as dst:
        names = src.namelist()
        if keep not in names:
            tmp.unlink()
            return 0
        for info in src.infolist():
            name = info.filename
            if name.startswith("librocksdbjni") and name != keep:
                continue
            dst.writestr(info, src.read(name))
    tmp.replace(jar)
    return before - jar.stat().st_size


def main(pyspark_dir: str) -> None:
    root = Path(pyspark_dir)
    freed = 0
    for jar in sorted((root / "jars").glob("*.jar")):
        if jar.name.startswith(UNUSED_JARS):
            freed += jar.stat().st_size
            jar.unlink()
        elif jar.name.startswith("rocksdbjni-"):
            freed += slim_rocksdb(jar)
    for folder in ("examples", "data"):
        if (root / folder).is_dir():
            freed += sum(f.stat().st_size for f in (root / folder).rglob("*") if f.is_file())
            shutil.rmtree(root / folder)
    print(f"prune_pyspark: {freed / 1e6:.0f} MB removed from {root}")


if __name__ == "__main__":
    main(sys.argv[1])
