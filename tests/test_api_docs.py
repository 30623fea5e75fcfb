"""The API reference (docs/api, Sphinx autodoc) builds from the installed
package's docstrings without a warning and documents the public entry
points, so it cannot fall behind the code: a renamed function, a module
that no longer imports or a docstring Sphinx cannot read fails here."""
from __future__ import annotations

from pathlib import Path

import pytest

API = Path(__file__).resolve().parent.parent / "docs" / "api"

#: the entry points a user starts from, each must have its own entry in the reference
PUBLIC = ("slash.spark.window_aggregate", "slash.spark.window_join", "slash.spark.stream",
          "slash.spark.session", "slash.runner.run", "slash.query.Query", "slash.query.JoinQuery",
          "slash.kafka.KafkaSource", "slash.kafka.KafkaStream", "slash.kafka.KafkaSink",
          "slash.metrics.LiveMetrics", "slash.Executor", "slash.GroupConfig", "slash.StateBackend",
          "slash.Channel", "slash.errors.SlashError", "slash.errors.SchemaError")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    build = pytest.importorskip("sphinx.cmd.build")
    out = tmp_path_factory.mktemp("api")
    warnings = out / "warnings.txt"
    code = build.build_main(["-b", "html", "-q", "-E", "-w", str(warnings), str(API), str(out / "html")])
    return code, warnings.read_text(), (out / "html" / "index.html").read_text()


def test_api_reference_builds_without_a_warning(built):
    code, warnings, _ = built
    assert code == 0 and warnings == "", warnings


@pytest.mark.parametrize("name", PUBLIC)
def test_api_reference_documents(built, name):
    _, _, html = built
    assert f'id="{name}"' in html, f"{name} is not in docs/api/index.rst's reference"
