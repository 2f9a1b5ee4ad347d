"""The CEL rules evaluate the same through the parser built from cached tables as through celpy's own."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

PROBE = """
import json, sys
from ftpipeline.spec import cel
from celpy.celparser import CELParser
rules = [("has(self.a) && self.a > 1", {"a": 2}), ("has(self.a) && self.a > 1", {"a": 1}),
         ("!has(self.url) || !has(self.secret)", {"url": "x", "secret": "y"}), ("self.xs.all(x, x != '')", {"xs": ["a", ""]}),
         ("true && !false", {})]
print(json.dumps({"results": [bool(cel._program(r).evaluate({"self": cel.json_to_cel(v)})) for r, v in rules],
                  "built_here": CELParser.CEL_PARSER is not None and CELParser.CEL_PARSER.options.cache is not False}))
"""


def _probe(cache_home: Path, *, disable: bool = False) -> dict[str, object]:
    import json

    env = {"XDG_CACHE_HOME": str(cache_home), "PATH": "/usr/bin:/bin"}
    code = PROBE if not disable else PROBE.replace("from ftpipeline.spec import cel",
                                                   "from ftpipeline.spec import cel\ncel._parser = lambda: None")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def test_the_cached_parser_judges_as_celpys_own(tmp_path: Path) -> None:
    own = _probe(tmp_path / "none", disable=True)
    assert own["results"] == [True, False, False, False, True]
    for _ in range(2):  # the first builds and writes the tables, the second loads them
        cached = _probe(tmp_path / "cache")
        assert cached == {"results": own["results"], "built_here": True}
    assert len(list((tmp_path / "cache" / "ftpipeline").glob("cel-*.grammar"))) == 1


def test_an_unwritable_cache_directory_leaves_celpy_to_build_its_parser(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    found = _probe(blocked)
    assert found["results"] == [True, False, False, False, True] and found["built_here"] is False
