"""Which Python client talks to the object store: the candidates side by side, one run, one real S3 server.

What a pipeline asks of the client, each a phase here:

- ``stage``: a step's parts and small objects, put one after another (``--parts`` objects of
  ``--part-kb``) — a sink task's part, a channel's checkpoint metadata;
- ``commit``: put-if-absent of a small commit object (``If-None-Match: *``), then the same again,
  which must be refused — a barrier's release; a client that cannot say it is out;
- ``upload``: checkpoint files from the local disk (``--files`` of ``--file-mb``), as RocksDB's table
  files go up at a checkpoint;
- ``download``: the same files back to the disk, as a moved channel's state comes down;
- ``list``: the keys under a prefix (``--parts`` of them), as a release finds a step's parts.

Candidates: ``boto3`` (AWS's SDK), ``obstore`` (Python bindings of the Rust
``object_store`` crate, which delta-rs also uses) and ``pyarrow`` (Arrow's
``S3FileSystem``, already a dependency: no conditional put). The phases
run in rounds, the candidates' order reversed each round, against the
embedded server (``ftpipeline/embedded/s3.py``) on this machine; printed:
the median of the rounds per phase, MB/s or ms per object, and each
candidate's ratio to the best. Its CPU time per phase (this process's,
which the sidecar would pay) is printed too.

    python bench/object_clients.py
    python bench/object_clients.py --rounds 5 --parts 400 --file-mb 32
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ftpipeline.embedded.s3 import EmbeddedS3
from ftpipeline.objectstore.config import S3Config

BUCKET = "bench"


class Candidate:
    name = ""

    def put(self, key: str, data: bytes) -> None: raise NotImplementedError
    def put_if_absent(self, key: str, data: bytes) -> bool: raise NotImplementedError
    def upload(self, key: str, path: Path) -> None: raise NotImplementedError
    def download(self, key: str, path: Path) -> None: raise NotImplementedError
    def list(self, prefix: str) -> list[str]: raise NotImplementedError


class Boto3(Candidate):
    name = "boto3"

    def __init__(self, c: S3Config) -> None:
        import boto3
        import botocore.config
        import botocore.exceptions

        self.errors = botocore.exceptions
        self.s3 = boto3.client("s3", endpoint_url=c.endpoint, region_name=c.region, aws_access_key_id=c.access_key,
                               aws_secret_access_key=c.secret_key,
                               config=botocore.config.Config(s3={"addressing_style": "path"}))

    def put(self, key: str, data: bytes) -> None:
        self.s3.put_object(Bucket=BUCKET, Key=key, Body=data)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        try:
            self.s3.put_object(Bucket=BUCKET, Key=key, Body=data, IfNoneMatch="*")
            return True
        except self.errors.ClientError as e:
            if e.response["Error"]["Code"] in ("PreconditionFailed", "ConditionalRequestConflict"):
                return False
            raise

    def upload(self, key: str, path: Path) -> None:
        self.s3.upload_file(str(path), BUCKET, key)

    def download(self, key: str, path: Path) -> None:
        self.s3.download_file(BUCKET, key, str(path))

    def list(self, prefix: str) -> list[str]:
        keys: list[str] = []
        for page in self.s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix):
            keys += [o["Key"] for o in page.get("Contents", [])]
        return keys


class Obstore(Candidate):
    name = "obstore"

    def __init__(self, c: S3Config) -> None:
        import obstore
        from obstore.exceptions import AlreadyExistsError, PreconditionError
        from obstore.store import S3Store

        self.ob = obstore
        self.refused = (AlreadyExistsError, PreconditionError)
        self.store = S3Store(BUCKET, endpoint=c.endpoint, region=c.region, access_key_id=c.access_key,
                             secret_access_key=c.secret_key, virtual_hosted_style_request=False,
                             client_options={"allow_http": True})

    def put(self, key: str, data: bytes) -> None:
        self.ob.put(self.store, key, data)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        try:
            self.ob.put(self.store, key, data, mode="create")
            return True
        except self.refused:
            return False

    def upload(self, key: str, path: Path) -> None:
        self.ob.put(self.store, key, path)

    def download(self, key: str, path: Path) -> None:
        with open(path, "wb") as f:
            for chunk in self.ob.get(self.store, key).stream(min_chunk_size=32 << 20):
                f.write(memoryview(chunk))

    def list(self, prefix: str) -> list[str]:
        return [o["path"] for batch in self.ob.list(self.store, prefix=prefix) for o in batch]


class PyArrow(Candidate):
    name = "pyarrow"

    def __init__(self, c: S3Config) -> None:
        from pyarrow import fs

        scheme, host = (c.endpoint or "").split("://", 1)
        self.fs = fs.S3FileSystem(access_key=c.access_key, secret_key=c.secret_key, region=c.region,
                                  endpoint_override=host, scheme=scheme, force_virtual_addressing=False)
        self.pafs = fs

    def put(self, key: str, data: bytes) -> None:
        with self.fs.open_output_stream(f"{BUCKET}/{key}") as f:
            f.write(data)

    def upload(self, key: str, path: Path) -> None:
        self.pafs.copy_files(str(path), f"{BUCKET}/{key}", destination_filesystem=self.fs)

    def download(self, key: str, path: Path) -> None:
        self.pafs.copy_files(f"{BUCKET}/{key}", str(path), source_filesystem=self.fs)

    def list(self, prefix: str) -> list[str]:
        sel = self.pafs.FileSelector(f"{BUCKET}/{prefix}", recursive=True)
        return [i.path for i in self.fs.get_file_info(sel) if i.type == self.pafs.FileType.File]


def timed(fn: Callable[[], Any]) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def run_round(cand: Candidate, r: int, args: argparse.Namespace, files: list[Path], out: Path) -> dict[str, tuple[float, float]]:
    prefix = f"{cand.name}/r{r}"
    part = bytes(range(256)) * (args.part_kb * 4)
    got: dict[str, tuple[float, float]] = {}
    got["stage"] = timed(lambda: [cand.put(f"{prefix}/parts/p{i:05d}", part) for i in range(args.parts)])
    got["list"] = timed(lambda: cand.list(f"{prefix}/parts/"))
    if not isinstance(cand, PyArrow):
        def commits() -> None:
            for i in range(args.commits):
                assert cand.put_if_absent(f"{prefix}/commit/{i}", b"{}")
                assert not cand.put_if_absent(f"{prefix}/commit/{i}", b"{}")
        got["commit"] = timed(commits)
    got["upload"] = timed(lambda: [cand.upload(f"{prefix}/files/{f.name}", f) for f in files])
    got["download"] = timed(lambda: [cand.download(f"{prefix}/files/{f.name}", out / f.name) for f in files])
    for f in files:
        assert (out / f.name).stat().st_size == f.stat().st_size
        (out / f.name).unlink()
    return got


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--parts", type=int, default=200)
    ap.add_argument("--part-kb", type=int, default=256)
    ap.add_argument("--commits", type=int, default=100)
    ap.add_argument("--files", type=int, default=8)
    ap.add_argument("--file-mb", type=int, default=16)
    ap.add_argument("--only", nargs="*", default=["boto3", "obstore", "pyarrow"])
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="object-clients-"))
    try:
        with EmbeddedS3(work / "server") as server:
            server.create_bucket(BUCKET)
            kinds = {"boto3": Boto3, "obstore": Obstore, "pyarrow": PyArrow}
            cands = [kinds[n](server.config) for n in args.only]
            files = []
            for i in range(args.files):
                f = work / f"table-{i:03d}.sst"
                f.write_bytes(bytes(range(256)) * (args.file_mb * 4096))
                files.append(f)
            out = work / "down"
            out.mkdir()
            results: dict[str, dict[str, list[tuple[float, float]]]] = {c.name: {} for c in cands}
            for r in range(args.rounds):
                for cand in (cands if r % 2 == 0 else list(reversed(cands))):
                    for phase, value in run_round(cand, r, args, files, out).items():
                        results[cand.name].setdefault(phase, []).append(value)
                print(f"round {r + 1}/{args.rounds} done", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    mb = args.files * args.file_mb
    units = {"stage": ("ms/object", args.parts), "list": ("ms", 1), "commit": ("ms/commit (2 requests)", args.commits),
             "upload": ("MB/s", mb), "download": ("MB/s", mb)}
    print(f"\n{args.parts} parts of {args.part_kb} KB, {args.commits} commits, {args.files} files of {args.file_mb} MB; "
          f"median of {args.rounds} rounds")
    print(f"{'phase':<9} {'client':<8} {'figure':>10} {'unit':<22} {'÷ best':>7} {'cpu s':>7}")
    for phase, (unit, n) in units.items():
        rows = []
        for name, phases in results.items():
            if phase not in phases:
                continue
            wall = statistics.median(v[0] for v in phases[phase])
            cpu = statistics.median(v[1] for v in phases[phase])
            figure = n / wall if unit == "MB/s" else wall * 1000 / n
            rows.append((name, figure, cpu))
        best = max(f for _, f, _ in rows) if unit == "MB/s" else min(f for _, f, _ in rows)
        for name, figure, cpu in rows:
            ratio = figure / best if unit == "MB/s" else best / figure
            print(f"{phase:<9} {name:<8} {figure:>10.2f} {unit:<22} {ratio:>7.2f} {cpu:>7.2f}")


if __name__ == "__main__":
    main()
