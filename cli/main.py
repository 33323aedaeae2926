"""Entry point of the `rankserve` console script."""

import typer

from cli import corpus, diagnose, evaluate, serve, teachers, train, worker
from core.settings import get_settings
from core.threads import apply_thread_policy

app = typer.Typer(
    name="rankserve",
    help="Similarity search with RankEncoder rank vectors: serve, evaluate, train, diagnose.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


@app.callback()
def main() -> None:
    """The `rankserve` group itself: no options of its own, every action is a subcommand
    (evaluate, serve, train, worker, teachers, diagnose, corpus); its help is the app's `help=`."""
    # Before any subcommand's first torch or numpy work (RANKSERVE_TORCH_THREADS, ...).
    apply_thread_policy(get_settings())


app.command("evaluate")(evaluate.evaluate)
app.command("serve")(serve.serve)
app.command("train")(train.train)
app.command("worker")(worker.worker)
app.add_typer(teachers.app, name="teachers")
app.add_typer(diagnose.app, name="diagnose")
app.add_typer(corpus.app, name="corpus")


if __name__ == "__main__":
    app()
