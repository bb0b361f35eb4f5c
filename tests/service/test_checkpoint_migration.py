"""service/checkpoint_access.py, migrate_operator_name: a checkpoint whose stateful operator Spark recorded under the
pandas interface's name gets the Row interface's, in every state metadata file, and nothing else changes."""

from __future__ import annotations

import json
from pathlib import Path

from service.checkpoint_access import OPERATOR_RENAMED, migrate_operator_name

OLD, NEW = OPERATOR_RENAMED


def _metadata(name: str, schema_path: str) -> str:
    """A state metadata file as Spark 4.3 writes it for the service's operator (format v2)."""
    body = {
        "operatorInfo": {"operatorId": 0, "operatorName": name},
        "stateStoreInfo": [
            {"storeName": "default", "numColsPrefixKey": 0, "numPartitions": 2, "stateSchemaFilePaths": [schema_path]}
        ],
        "operatorPropertiesJson": json.dumps(
            {
                "timeMode": "NoTime",
                "outputMode": "Append",
                "stateVariables": [{"stateName": "task", "stateVariableType": "ValueState", "ttlEnabled": False}],
            }
        ),
    }
    return "v2\n" + json.dumps(body, separators=(",", ":"))


def _checkpoint(root: Path, name: str, batches: tuple[int, ...] = (0, 3)) -> list[Path]:
    folder = root / "state" / "0" / "_metadata" / "v2"
    folder.mkdir(parents=True)
    files = []
    for b in batches:
        f = folder / str(b)
        f.write_text(_metadata(name, f"file:{root}/state/0/_stateSchema/default/{b}_x"))
        (folder / f".{b}.crc").write_bytes(b"crc")
        files.append(f)
    return files


def test_the_old_name_is_replaced_in_every_metadata_file(tmp_path):
    files = _checkpoint(tmp_path, OLD)
    before = [f.read_text() for f in files]
    assert migrate_operator_name(str(tmp_path)) == 2
    for f, text in zip(files, before, strict=True):
        version, _, body = f.read_text().partition("\n")
        assert version == "v2"
        assert json.loads(body) == json.loads(text.partition("\n")[2].replace(OLD, NEW))
        assert not f.with_name(f".{f.name}.crc").exists()  # the old text's checksum
    assert sorted(p.name for p in files[0].parent.iterdir()) == ["0", "3"]  # no temporary file left
    assert migrate_operator_name(str(tmp_path)) == 0  # once


def test_a_checkpoint_of_the_row_interface_is_left_alone(tmp_path):
    files = _checkpoint(tmp_path, NEW)
    before = [(f.read_text(), f.stat().st_mtime_ns) for f in files]
    assert migrate_operator_name(str(tmp_path)) == 0
    assert [(f.read_text(), f.stat().st_mtime_ns) for f in files] == before
    assert all(f.with_name(f".{f.name}.crc").exists() for f in files)


def test_no_checkpoint_a_remote_one_and_other_files(tmp_path):
    assert migrate_operator_name(str(tmp_path / "none")) == 0
    assert migrate_operator_name("s3a://bucket/checkpoint") == 0
    other = tmp_path / "state" / "0" / "_metadata" / "metadata"
    other.parent.mkdir(parents=True)
    other.write_text("v1\nnot json")
    assert migrate_operator_name(str(tmp_path)) == 0
    assert migrate_operator_name(f"file:{tmp_path}") == 0


def test_a_file_uri_is_the_local_folder(tmp_path):
    _checkpoint(tmp_path, OLD, batches=(5,))
    assert migrate_operator_name(f"file://{tmp_path}") == 1
