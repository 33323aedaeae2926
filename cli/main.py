"""Entry point of the `rankserve` console script."""

import typer

from cli import evaluate, teachers, train

app = typer.Typer(
    name="rankserve",
    help="Similarity search with RankEncoder rank vectors: serve, evaluate, train, diagnose.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


@app.callback()
def main() -> None:
    """Keeps `rankserve` a command group even while it has a single subcommand."""


app.command("evaluate")(evaluate.evaluate)
app.command("train")(train.train)
app.add_typer(teachers.app, name="teachers")


if __name__ == "__main__":
    app()
