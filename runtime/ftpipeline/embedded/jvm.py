"""The command line of an embedded server's JVM (ZooKeeper from PySpark's jars, Kafka from its pinned ones).

Both run on the JRE the workers already need, found on ``PATH`` or under
``JAVA_HOME``; both log through log4j2 with the runtime's configuration
(errors only, to stderr, which is the server's log file); both take their
JVM options from an environment variable that replaces the defaults whole.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path

LOG4J = Path(__file__).resolve().parent.parent / "obs" / "log4j2.properties"


def java() -> str:
    return shutil.which("java") or str(Path(os.environ.get("JAVA_HOME", "/nonexistent")) / "bin" / "java")


def jvm_command(options_env: str, default_options: str, classpath: str, main: str, args: Sequence[str] = (),
                extra_options: Sequence[str] = ()) -> list[str]:
    """``java [options] [extra_options] -cp classpath main args``: ``options`` from ``options_env`` if set,
    else ``default_options``; ``extra_options`` are the server's own (never replaced)."""
    options = os.environ.get(options_env, default_options).split()
    return [java(), *options, *extra_options, "-cp", classpath, f"-Dlog4j2.configurationFile=file:{LOG4J}",
            main, *args]
