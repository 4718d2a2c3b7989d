"""Every product command's ``--help``, depth first, at a fixed width: the golden text
``cli_help.txt`` holds (``python -m tests.platform.cli_help > tests/platform/cli_help.txt``
after a deliberate change of a command's help).

Rules: the root's help lists the plugins' commands too; their own help is the plugin's.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import click
from click.testing import CliRunner

from cloudloop.cli import main

GOLDEN = Path(__file__).with_name("cli_help.txt")
WIDTH = 100


def _product(command: click.Command) -> bool:
    return (getattr(command.callback, "__module__", None) or "").startswith("cloudloop.")


def command_paths(group: click.Command, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """``group``'s path and those of its product commands, depth first by name."""
    yield path
    if isinstance(group, click.Group):
        context = click.Context(group)
        for name in group.list_commands(context):
            command = group.get_command(context, name)
            if command is not None and _product(command):
                yield from command_paths(command, (*path, name))


def render() -> str:
    runner = CliRunner()
    parts = []
    for path in command_paths(main):
        result = runner.invoke(main, [*path, "--help"], terminal_width=WIDTH, prog_name="cloudloop")
        parts.append(f"=== cloudloop {' '.join(path)} --help (exit {result.exit_code})\n")
        parts.append(result.output)
    return "".join(parts)


if __name__ == "__main__":
    print(render(), end="")
