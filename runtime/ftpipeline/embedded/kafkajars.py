"""The Kafka broker's jars: a closure pinned here, fetched from Maven Central, each checked by its SHA-256.

``ftpipeline run`` starts a private Kafka broker (``embedded/kafka.py``) when
a pipeline names no bootstrap servers, as it starts Redis and ZooKeeper. A
broker is Apache Kafka's own jars on the JRE the workers already need, but
no wheel ships them, so they come from Maven Central — the one place they
are published — exactly as pinned in ``kafka.lock``: one line per jar,
``group:artifact:version sha256``. Maven resolved that closure once
(``python -m ftpipeline.embedded.kafkajars lock``, which runs ``mvn`` on
``POM`` below); fetching needs no resolver, and a file whose digest differs
from the lock is refused, so a run never executes a jar nobody pinned.

The jars are kept in one directory shared by every run
(``FTPIPELINE_KAFKA_JARS``, default ``~/.cache/ftpipeline/kafka-<version>``);
the project image fetches them when it is built, running this file alone
(``python3 kafkajars.py fetch DIR``: it needs the standard library and the
lock beside it, so that layer is rebuilt only when the lock changes).
``FTPIPELINE_MAVEN_REPOSITORY`` names a mirror of Maven Central (any URL
urllib opens, ``file://`` too).
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

KAFKA_VERSION = "4.4.0"
LOCK = Path(__file__).with_name("kafka.lock")
CENTRAL = "https://repo1.maven.org/maven2"
# the broker, and log4j's binding for the SLF4J API the broker logs through (else its logs go nowhere)
POM = f"""<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>io.ftpipeline</groupId><artifactId>kafka-broker-closure</artifactId><version>1</version>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>{KAFKA_VERSION}</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j-impl</artifactId><version>2.24.3</version></dependency>
  </dependencies>
</project>
"""


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


_LINE = re.compile(r"^([\w.-]+):([\w.-]+):([\w.-]+) ([0-9a-f]{64})$")


def locked(lock: Path = LOCK) -> list[Jar]:
    jars = []
    for number, line in enumerate(lock.read_text().splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        match = _LINE.match(line)
        if match is None:
            raise ValueError(f"{lock}:{number}: not 'group:artifact:version sha256': {line!r}")
        jars.append(Jar(*match.groups()))
    return jars


def jars_dir() -> Path:
    configured = os.environ.get("FTPIPELINE_KAFKA_JARS")
    if configured:
        return Path(configured)
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "ftpipeline" / f"kafka-{KAFKA_VERSION}"


def missing(directory: Path, jars: list[Jar] | None = None) -> list[Jar]:
    return [j for j in (jars if jars is not None else locked()) if not (directory / j.file).is_file()]


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def fetch(directory: Path, jars: list[Jar] | None = None,
          progress: Callable[[Jar, int], None] | None = None) -> list[Jar]:
    """Download what ``directory`` lacks of the lock (``progress(jar, size)`` after each), verifying each
    digest before it takes the jar's name, so an interrupted or tampered download is never on the class
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
                raise ValueError(f"{url}: SHA-256 {found} is not the locked {jar.sha256} (kafka.lock); not used")
            os.chmod(tmp, 0o644)  # public jars: readable by the user a server runs as (mkstemp makes them 0600)
            os.replace(tmp, directory / jar.file)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        if progress is not None:
            progress(jar, (directory / jar.file).stat().st_size)
    return wanted


def classpath(directory: Path) -> str:
    """The broker's class path: the locked jars in ``directory`` (all of them, or a FileNotFoundError
    naming what is missing and how to get it)."""
    absent = missing(directory)
    if absent:
        raise FileNotFoundError(f"{len(absent)} Kafka jars are missing from {directory} (first: {absent[0].file}); "
                                f"run 'ftpipeline fetch-kafka' (it downloads them from Maven Central)")
    return os.pathsep.join(str(directory / j.file) for j in locked())


def lock(out: Path = LOCK) -> None:
    """Resolve ``POM`` with Maven and pin what it resolved (a maintainer's step, when KAFKA_VERSION changes)."""
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "pom.xml").write_text(POM)
        listing = Path(tmp) / "list.txt"
        subprocess.run(["mvn", "-q", "-B", "dependency:resolve", "dependency:list", "-DincludeScope=runtime",
                        f"-DoutputFile={listing}"], cwd=tmp, check=True)
        repository = Path.home() / ".m2" / "repository"
        lines = []
        for entry in sorted(re.findall(r"^\s+([\w.-]+):([\w.-]+):jar:([\w.-]+):\w+", listing.read_text(), re.M)):
            group, artifact, version = entry
            jar = Jar(group, artifact, version, "")
            lines.append(f"{group}:{artifact}:{version} {_sha256(repository / jar.url_path)}")
    header = f"# Apache Kafka {KAFKA_VERSION}'s broker and what it needs (python -m ftpipeline.embedded.kafkajars lock)"
    out.write_text("\n".join([header, *lines]) + "\n")


if __name__ == "__main__":
    if sys.argv[1:] == ["lock"]:
        lock()
    elif len(sys.argv) == 3 and sys.argv[1] == "fetch":
        print(f"fetched {len(fetch(Path(sys.argv[2])))} Kafka jars into {sys.argv[2]}")
    else:
        sys.exit("usage: python -m ftpipeline.embedded.kafkajars lock | fetch DIR")
