"""Jars no wheel ships: closures pinned here, fetched from Maven Central, each checked by its SHA-256.

Two closures of Java code come from Maven Central, the one place they are
published:

- ``KAFKA``: Apache Kafka's broker, which ``ftpipeline run`` starts when a
  pipeline on Kafka names no cluster (``embedded/kafka.py``), and the chart
  runs as its optional broker;
- ``DELTA``: delta-spark and what it needs beyond PySpark's own jars, put on
  the class path of a Spark process whose settings name Delta's SQL
  extension (``worker/session.py``: user code that reads Delta tables; a
  Delta sink's steps are committed without Spark, ``barrier/delta.py``).

Each is pinned exactly in a lock file beside this one (``kafka.lock``,
``delta.lock``): one line per jar, ``group:artifact:version sha256``. Maven
resolved each closure once (``python -m ftpipeline.embedded.jars lock NAME``
runs ``mvn`` on the closure's POM); fetching needs no resolver, and a file
whose digest differs from the lock is refused, so a run never executes a jar
nobody pinned.

A closure's jars are kept in one directory shared by every run (its
environment variable, e.g. ``FTPIPELINE_KAFKA_JARS``, default
``~/.cache/ftpipeline/<name>-<version>``); ``ftpipeline fetch-jars`` fills it
with progress, and the project image fetches both when it is built, running
this file alone (``python3 jars.py fetch NAME DIR``: it needs the standard
library and the locks beside it, so that layer is rebuilt only when a lock
changes). ``FTPIPELINE_MAVEN_REPOSITORY`` names a mirror of Maven Central
(any URL urllib opens, ``file://`` too).
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

CENTRAL = "https://repo1.maven.org/maven2"
HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Jar:
    group: str
    artifact: str
    version: str
    sha256: str

    @property
    def file(self) -> str:
        return f"{self.artifact}-{self.version}.jar"

    @property
    def url_path(self) -> str:
        return f"{self.group.replace('.', '/')}/{self.artifact}/{self.version}/{self.file}"


def cache_root() -> Path:
    """``~/.cache/ftpipeline`` (``$XDG_CACHE_HOME/ftpipeline``): what a machine keeps across runs."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ftpipeline"


_LINE = re.compile(r"^([\w.-]+):([\w.-]+):([\w.-]+) ([0-9a-f]{64})$")


def _dependency(coordinates: str) -> str:
    group, artifact, version = coordinates.split(":")
    return (f"<dependency><groupId>{group}</groupId><artifactId>{artifact}</artifactId>"
            f"<version>{version}</version></dependency>")


@dataclass(frozen=True)
class Closure:
    """One pinned closure: what it is for, its lock, where its jars are kept."""

    name: str                    # kafka, delta: the lock's and the cache directory's name
    title: str                   # what the jars are, for messages
    version: str
    roots: tuple[str, ...]       # group:artifact:version Maven resolves the closure from
    # artifacts left out of the lock: on the class path already (a Spark process's: PySpark's own jars, and
    # these, which PySpark ships under other names)
    provided: tuple[str, ...] = ()
    beside_pyspark: bool = False

    @property
    def lock_file(self) -> Path:
        return HERE / f"{self.name}.lock"

    @property
    def env(self) -> str:
        return f"FTPIPELINE_{self.name.upper()}_JARS"

    def locked(self, lock: Path | None = None) -> list[Jar]:
        lock = lock or self.lock_file
        jars = []
        for number, line in enumerate(lock.read_text().splitlines(), 1):
            if not line.strip() or line.startswith("#"):
                continue
            match = _LINE.match(line)
            if match is None:
                raise ValueError(f"{lock}:{number}: not 'group:artifact:version sha256': {line!r}")
            jars.append(Jar(*match.groups()))
        return jars

    def jars_dir(self) -> Path:
        configured = os.environ.get(self.env)
        if configured:
            return Path(configured)
        return cache_root() / f"{self.name}-{self.version}"

    def missing(self, directory: Path) -> list[Jar]:
        return missing(directory, self.locked())

    def fetch(self, directory: Path | None = None, progress: Callable[[Jar, int], None] | None = None) -> list[Jar]:
        return fetch(directory or self.jars_dir(), self.locked(), progress)

    def paths(self, directory: Path | None = None) -> list[Path]:
        """The locked jars in ``directory`` (all of them, or a FileNotFoundError naming what is missing and
        how to get it)."""
        directory = directory or self.jars_dir()
        absent = self.missing(directory)
        if absent:
            raise FileNotFoundError(f"{len(absent)} {self.title} jars are missing from {directory} (first: "
                                    f"{absent[0].file}); run 'ftpipeline fetch-jars {self.name}' (it downloads "
                                    f"them from Maven Central)")
        return [directory / j.file for j in self.locked()]

    def classpath(self, directory: Path | None = None) -> str:
        return os.pathsep.join(map(str, self.paths(directory)))

    def pom(self) -> str:
        return ('<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
                f"<groupId>io.ftpipeline</groupId><artifactId>{self.name}-closure</artifactId><version>1</version>"
                f"<dependencies>{''.join(map(_dependency, self.roots))}</dependencies></project>\n")

    def lock(self, out: Path | None = None) -> None:
        """Resolve the roots with Maven and pin what it resolved (a maintainer's step, when a version changes).
        Dependencies Maven calls ``provided`` are left out, and for jars loaded beside PySpark's every artifact
        PySpark ships (in another version, often): two of one class on a class path is a conflict."""
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / "pom.xml").write_text(self.pom())
            listing = Path(tmp) / "list.txt"
            subprocess.run(["mvn", "-q", "-B", "dependency:resolve", "dependency:list", "-DincludeScope=runtime",
                            f"-DoutputFile={listing}"], cwd=tmp, check=True)
            repository = Path.home() / ".m2" / "repository"
            lines = []
            left_out = set(self.provided) | (_pyspark_artifacts() if self.beside_pyspark else set())
            for group, artifact, version in sorted(
                    re.findall(r"^\s+([\w.-]+):([\w.-]+):jar:([\w.-]+):\w+", listing.read_text(), re.M)):
                if artifact in left_out:
                    continue
                jar = Jar(group, artifact, version, "")
                lines.append(f"{group}:{artifact}:{version} {_sha256(repository / jar.url_path)}")
        header = f"# {self.title} {self.version} and what it needs (python -m ftpipeline.embedded.jars lock {self.name})"
        (out or self.lock_file).write_text("\n".join([header, *lines]) + "\n")


# the broker, and log4j's binding for the SLF4J API the broker logs through (else its logs go nowhere)
KAFKA = Closure("kafka", "Apache Kafka broker", "4.4.0",
                ("org.apache.kafka:kafka_2.13:4.4.0", "org.apache.logging.log4j:log4j-slf4j-impl:2.24.3"))
# delta-spark for the Spark of the pyspark wheel (its artifact names the Spark line it was built for: 4.2), with
# jackson's Java 8 module at the version of PySpark's jackson; PySpark has commons-logging as jcl-over-slf4j,
# javax.annotation as jakarta, and a RoaringBitmap that needs no shims
DELTA = Closure("delta", "Delta Lake (delta-spark)", "4.4.0",
                ("io.delta:delta-spark_4.2_2.13:4.4.0", "com.fasterxml.jackson.datatype:jackson-datatype-jdk8:2.21.2"),
                provided=("commons-logging", "javax.annotation-api", "shims"), beside_pyspark=True)
CLOSURES = {c.name: c for c in (KAFKA, DELTA)}


def _pyspark_artifacts() -> set[str]:
    import pyspark  # a maintainer's step (lock): the wheel whose Spark the closure runs beside

    names = (p.name for p in (Path(pyspark.__file__).parent / "jars").glob("*.jar"))
    return {m.group(1) for n in names if (m := re.match(r"^(.+?)-\d[\w.-]*\.jar$", n))}


def missing(directory: Path, jars: list[Jar]) -> list[Jar]:
    return [j for j in jars if not (directory / j.file).is_file()]


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def fetch(directory: Path, jars: list[Jar], progress: Callable[[Jar, int], None] | None = None) -> list[Jar]:
    """Download what ``directory`` lacks of ``jars`` (``progress(jar, size)`` after each), verifying each
    digest before it takes the jar's name, so an interrupted or tampered download is never on a class
    path. Returns what was fetched."""
    repository = os.environ.get("FTPIPELINE_MAVEN_REPOSITORY", CENTRAL).rstrip("/")
    directory.mkdir(parents=True, exist_ok=True)
    wanted = missing(directory, jars)
    for jar in wanted:
        url = f"{repository}/{jar.url_path}"
        fd, tmp = tempfile.mkstemp(prefix=f".{jar.file}.", dir=directory)
        try:
            with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=60) as response:
                while chunk := response.read(1 << 20):
                    out.write(chunk)
            found = _sha256(Path(tmp))
            if found != jar.sha256:
                raise ValueError(f"{url}: SHA-256 {found} is not the locked {jar.sha256}; not used")
            os.chmod(tmp, 0o644)  # public jars: readable by the user a server runs as (mkstemp makes them 0600)
            os.replace(tmp, directory / jar.file)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        if progress is not None:
            progress(jar, (directory / jar.file).stat().st_size)
    return wanted


if __name__ == "__main__":
    args = sys.argv[1:]
    if len(args) == 2 and args[0] == "lock" and args[1] in CLOSURES:
        CLOSURES[args[1]].lock()
    elif len(args) == 3 and args[0] == "fetch" and args[1] in CLOSURES:
        print(f"fetched {len(CLOSURES[args[1]].fetch(Path(args[2])))} {args[1]} jars into {args[2]}")
    else:
        sys.exit(f"usage: python -m ftpipeline.embedded.jars lock NAME | fetch NAME DIR  (NAME: {', '.join(CLOSURES)})")
