"""The README's tables of every source's and sink's fields are the schema's, not a copy that drifts."""

from __future__ import annotations

from pathlib import Path

from ftpipeline.spec.reference import EXAMPLES, _kinds, replaced, tables

README = Path(__file__).resolve().parents[3] / "README.md"


def test_the_readme_holds_the_tables_the_schema_gives() -> None:
    text = README.read_text()
    assert replaced(text) == text, "the field tables are stale: python -m ftpipeline.spec.reference --write README.md"


def test_every_source_and_sink_kind_has_every_field_and_a_runnable_example() -> None:
    generated = tables()
    for kind, schema, _ in _kinds():
        assert f"**`{kind}`**" in generated
        assert all(f"| `{name}` |" in generated for name in schema["properties"]), kind
        example = EXAMPLES[kind]
        assert (README.parent / example / "pipeline.yaml").is_file(), example
