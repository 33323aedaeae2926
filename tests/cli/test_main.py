"""The `rankserve` group: every subcommand listed in its order, and a subcommand's module (with
the libraries only it needs) imported only when that subcommand is looked up."""

import subprocess
import sys

from typer.testing import CliRunner

from cli.main import app
from tests.cli.conftest import flat

# What `rankserve corpus` must not wait for: the encoder's and the charts' libraries.
PROBE = """
import sys
from cli.main import app
try:
    app(["corpus", "--help"])
except SystemExit as end:
    assert end.code == 0, end.code
print([name for name in ("sentence_transformers", "matplotlib") if name in sys.modules])
"""


def test_a_corpus_command_imports_neither_the_encoder_nor_the_charts() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, timeout=300
    )
    assert "Export and import the document corpus" in flat(done.stdout)
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_the_help_lists_every_subcommand_in_order() -> None:
    result = CliRunner().invoke(app, ["--help"])
    assert result.exit_code == 0, result.output
    names = ["evaluate", "serve", "train", "worker", "teachers", "diagnose", "corpus"]
    at = [flat(result.output).find(f" {name} ") for name in names]
    assert -1 not in at and at == sorted(at), at


def test_a_mistyped_subcommand_is_refused_with_a_suggestion() -> None:
    result = CliRunner().invoke(app, ["corpuss"])
    assert result.exit_code == 2
    assert "No such command 'corpuss'. Did you mean 'corpus'?" in flat(result.output)
