"""Entry point of the `rankserve` console script.

A subcommand's module is imported when that subcommand is looked up (to run it, or to list it
in the help): importing them all, sentence-transformers and matplotlib among them, took 11 s on
a 2-core AMD EPYC Zen 3 before `rankserve corpus import` could start, which needs neither.
"""

import importlib
from collections.abc import Iterator, Mapping
from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup
from typer.models import CommandInfo

from core.settings import get_settings
from core.threads import apply_thread_policy

# In the order the help lists them: the module, and in it a command function or a Typer group.
_SUBCOMMANDS = {
    "evaluate": ("cli.evaluate", "evaluate"),
    "serve": ("cli.serve", "serve"),
    "train": ("cli.train", "train"),
    "worker": ("cli.worker", "worker"),
    "teachers": ("cli.teachers", "app"),
    "diagnose": ("cli.diagnose", "app"),
    "corpus": ("cli.corpus", "app"),
}


class _Subcommands(Mapping[str, TyperCommand | TyperGroup]):
    """The rankserve group's commands by name, each built from its module on first lookup."""

    def __init__(self) -> None:
        self._built: dict[str, TyperCommand | TyperGroup] = {}

    def __getitem__(self, name: str) -> TyperCommand | TyperGroup:
        if name not in self._built:
            module, attribute = _SUBCOMMANDS[name]  # KeyError: no such command
            target = getattr(importlib.import_module(module), attribute)
            if isinstance(target, typer.Typer):
                command: TyperCommand | TyperGroup = typer.main.get_group(target)
            else:
                command = typer.main.get_command_from_info(
                    CommandInfo(name=name, callback=target),
                    pretty_exceptions_short=app.pretty_exceptions_short,
                    rich_markup_mode=app.rich_markup_mode,
                )
            command.name = name
            self._built[name] = command
        return self._built[name]

    def __iter__(self) -> Iterator[str]:
        return iter(_SUBCOMMANDS)

    def __len__(self) -> int:
        return len(_SUBCOMMANDS)


class _Group(TyperGroup):
    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        # Listing and typo suggestions read only the names; a lookup builds the one asked for.
        self.commands = _Subcommands()  # type: ignore[assignment]


app = typer.Typer(
    name="rankserve",
    cls=_Group,
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


if __name__ == "__main__":
    app()
