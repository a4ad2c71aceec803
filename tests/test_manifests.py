"""No manifest file stops ``tickwork dev``: whatever a file holds, it is refused with an
error naming the file and the field, the other files load, and the sync goes on."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tickwork.core import limits
from tickwork.core.clock import FrozenClock
from tickwork.engine import manifests
from tickwork.engine.jobs import Jobs
from tickwork.engine.manifest_sync import ManifestSync
from tickwork.store.database import Database

HEAD = """\
apiVersion: tickwork.dev/v1alpha1
kind: ScheduledJob
metadata: {{name: {name}, namespace: acme}}
spec:
"""


def manifest(name: str, spec: str) -> str:
    return HEAD.format(name=name) + spec


GOOD = manifest("good", "  schedule: {cron: '0 2 * * *', timeZone: Europe/Berlin}\n")

BAD = {
    "folder-zone": (
        "  schedule: {cron: '0 2 * * *', timeZone: Europe}\n",
        "spec.schedule.timeZone",
    ),
    "etc-zone": ("  schedule: {cron: '0 2 * * *', timeZone: Etc}\n", "spec.schedule.timeZone"),
    "long-zone": (
        "  schedule: {cron: '0 2 * * *', timeZone: '" + "x" * 300 + "'}\n",
        "spec.schedule.timeZone",
    ),
    "deep-payload": ("  payload: " + "[" * 254 + "]" * 254 + "\n", "spec.payload"),
    "deeper-payload": ("  payload:\n    a: " + "[" * 5000 + "]" * 5000 + "\n", "spec.payload"),
    "deep-block": (
        "  payload:\n" + "".join("  " * (i + 2) + "-\n" for i in range(300)),
        "spec.payload",
    ),
    "a-bit-deep": ("  payload: " + "[" * 33 + "]" * 33 + "\n", "spec.payload"),
    "itself": ("  payload: &loop [*loop]\n", "spec.payload"),
    "alias-bomb": (
        "  payload:\n    a: &a [x,x,x,x,x,x,x,x,x]\n"
        + "".join(
            f"    {b}: &{b} [{','.join('*' + a for _ in range(9))}]\n"
            for a, b in zip("abcdefg", "bcdefgh", strict=True)
        ),
        "spec.payload",
    ),
    "secret": ("  payload: {db: {password: hunter2}}\n", "spec.payload.db.password"),
    "snake": ("  timeout_seconds: 5\n", "spec.timeout_seconds"),
    "coerced": ("  paused: 'yes'\n", "spec.paused"),
    "unicode-cron": ("  schedule: {cron: '\u0663 * * * *'}\n", "spec.schedule.cron"),
    "list-spec": ("  - 1\n", "spec"),
}


def write_folder(folder: Path) -> None:
    (folder / "good.yaml").write_text(GOOD)
    for name, (spec, _) in BAD.items():
        (folder / f"{name}.yaml").write_text(manifest(name, spec))
    (folder / "binary.yaml").write_bytes(b"\xff\xfe\x00\x01 not text")
    (folder / "broken.yaml").write_text("kind: ScheduledJob\nspec: [unclosed\n")
    (folder / "meta.yaml").write_text(
        "apiVersion: tickwork.dev/v1alpha1\nkind: ScheduledJob\nmetadata: [a]\n"
    )
    (folder / "namespace.yaml").write_text(
        "apiVersion: tickwork.dev/v1alpha1\nkind: ScheduledJob\n"
        "metadata: {name: x, namespace: {a: 1}}\n"
    )
    (folder / "name.yaml").write_text(
        "apiVersion: tickwork.dev/v1alpha1\nkind: ScheduledJob\nmetadata: {name: 'x\\n'}\n"
    )
    (folder / "huge.yaml").write_text("# " + "x" * limits.MAX_MANIFEST_BYTES + "\n")


def test_every_bad_file_is_refused_naming_its_field_and_the_good_one_loads(
    tmp_path: Path,
) -> None:
    write_folder(tmp_path)
    jobs, errors = manifests.load_folder(tmp_path)
    assert [job.name for job in jobs] == ["good"]
    by_file = {Path(error.split(":")[0].split(" ")[0]).stem: error for error in errors}
    for name, (_, field) in BAD.items():
        assert f": {field}: " in by_file[name], by_file[name]
    assert "not UTF-8" in by_file["binary"]
    assert "cannot read" in by_file["broken"]
    assert "metadata must be a mapping" in by_file["meta"]
    assert "metadata.namespace" in by_file["namespace"]
    assert "metadata.name" in by_file["name"]
    assert "larger than" in by_file["huge"]
    assert len(errors) == len(BAD) + 6
    assert all(len(error) < 600 for error in errors), max(errors, key=len)


async def test_the_dev_sync_logs_each_refusal_and_keeps_going(
    database: Database, clock: FrozenClock, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write_folder(tmp_path)
    jobs = Jobs(database, clock)
    sync = ManifestSync(jobs, tmp_path)
    with caplog.at_level(logging.ERROR, logger="tickwork.manifests"):
        await sync.sync()
    refused = [record for record in caplog.records if record.getMessage().startswith("manifest")]
    assert len(refused) == len(BAD) + 6
    assert "spec.schedule.timeZone" in caplog.text
    assert (await jobs.get("acme", "good")).definition.spec.schedule is not None
    # Fixed on disk, the file loads on the next sync.
    (tmp_path / "folder-zone.yaml").write_text(
        manifest("folder-zone", "  schedule: {cron: '0 2 * * *', timeZone: Europe/Paris}\n")
    )
    await sync.sync()
    assert (await jobs.get("acme", "folder-zone")).definition.spec.schedule is not None
