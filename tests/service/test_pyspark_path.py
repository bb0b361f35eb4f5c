"""service.spark.pyspark_path: Spark's zips of pyspark and py4j go to the end of a Python worker's path when the
installed pyspark is the same release (``test_python_worker`` checks a real worker imports the installed one)."""

from __future__ import annotations

import zipfile
from pathlib import Path

from service.spark.pyspark_path import prefer_installed


def _layout(tmp: Path, zipped_version: str, installed_version: str | None) -> tuple[str, str, str]:
    lib = tmp / "spark" / "python" / "lib"
    lib.mkdir(parents=True)
    pyspark_zip, py4j_zip = lib / "pyspark.zip", lib / "py4j-0.10.9.9-src.zip"
    with zipfile.ZipFile(pyspark_zip, "w") as z:
        z.writestr("pyspark/__init__.py", "")
        z.writestr("pyspark/version.py", zipped_version)
    with zipfile.ZipFile(py4j_zip, "w") as z:
        z.writestr("py4j/__init__.py", "")
    site = tmp / "site-packages"
    site.mkdir()
    if installed_version is not None:
        (site / "pyspark").mkdir()
        (site / "pyspark" / "__init__.py").write_text("")
        (site / "pyspark" / "version.py").write_text(installed_version)
    return str(pyspark_zip), str(py4j_zip), str(site)


def test_the_zips_go_last_when_the_installed_pyspark_is_the_same_release(tmp_path):
    pz, jz, site = _layout(tmp_path, '__version__ = "4.3.0"\n', '__version__ = "4.3.0"\n')
    path = ["/work", pz, jz, site, "/usr/lib/python3.11"]
    assert prefer_installed(path, modules={}) is True
    assert path == ["/work", site, "/usr/lib/python3.11", pz, jz]
    assert prefer_installed(path, modules={}) is True  # idempotent: still last


def test_another_release_or_none_installed_keeps_sparks_order(tmp_path):
    pz, jz, site = _layout(tmp_path, '__version__ = "4.3.0"\n', '__version__ = "4.2.1"\n')
    path = [pz, jz, site]
    assert prefer_installed(path, modules={}) is False and path == [pz, jz, site]
    other = tmp_path / "other"
    other.mkdir()
    pz2, jz2, site2 = _layout(other, '__version__ = "4.3.0"\n', None)
    path = [pz2, jz2, site2]
    assert prefer_installed(path, modules={}) is False and path == [pz2, jz2, site2]


def test_nothing_moves_once_pyspark_is_imported_or_without_the_zips(tmp_path):
    pz, jz, site = _layout(tmp_path, "v = 1\n", "v = 1\n")
    path = [pz, jz, site]
    assert prefer_installed(path, modules={"pyspark": object()}) is False and path == [pz, jz, site]
    assert prefer_installed([site], modules={}) is False
    broken = tmp_path / "broken" / "pyspark.zip"
    broken.parent.mkdir()
    broken.write_bytes(b"not a zip")
    path = [str(broken), site]
    assert prefer_installed(path, modules={}) is False and path == [str(broken), site]
