"""The ``cloudloop`` command: ``dev``, ``worker``, ``starter``, ``status`` and ``stack build``."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from pathlib import Path

import click

from cloudloop.settings import Settings

DEFAULT_STATE = Path(".cloudloop/state")


def _logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)-7s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    for noisy in ("urllib3", "botocore", "kubernetes", "leaderelection", "temporalio.activity"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


@click.group()
@click.option("-v", "--verbose", is_flag=True, help="Debug logging.")
def main(verbose: bool) -> None:
    """cloudloop: Kubernetes cloud-provider integration on Temporal workflows."""
    _logging(verbose)


@main.command()
def worker() -> None:
    """Run a Temporal worker (workflows + the configured cloud's activities)."""
    from workers.main import run

    asyncio.run(run(Settings()))


@main.command()
def starter() -> None:
    """Run the leader-elected watchers that start workflows."""
    from starters.main import run

    asyncio.run(run(Settings()))


@main.command()
@click.option(
    "--state-dir", type=click.Path(path_type=Path), default=DEFAULT_STATE, show_default=True
)
@click.option("--temporal-port", type=int, default=7233, show_default=True)
@click.option("--ui-port", type=int, default=8233, show_default=True)
@click.option("--fresh", is_flag=True, help="Wipe the state folder first (etcd, Temporal history).")
def dev(state_dir: Path, temporal_port: int, ui_port: int, fresh: bool) -> None:
    """Bring up the embedded local stack with workers, starters and a demo; Ctrl-C stops it all."""
    from cloudloop.devmode import run_dev

    asyncio.run(
        run_dev(state_dir.resolve(), temporal_port=temporal_port, ui_port=ui_port, fresh=fresh)
    )


@main.command()
@click.option(
    "--state-dir", type=click.Path(path_type=Path), default=DEFAULT_STATE, show_default=True
)
def status(state_dir: Path) -> None:
    """Show what a running `cloudloop dev` (or the configured cluster) looks like."""
    from cloudloop.devmode import print_status

    settings = Settings()
    stack_file = state_dir / "stack.json"
    stack = json.loads(stack_file.read_text()) if stack_file.exists() else None
    ok = asyncio.run(print_status(settings, stack))
    sys.exit(0 if ok else 1)


@main.group()
def stack() -> None:
    """The embedded local stack's Go tools."""


@stack.command("build")
@click.argument("names", nargs=-1)
def stack_build(names: tuple[str, ...]) -> None:
    """Build (or find cached) stack binaries and print their paths."""
    from cloudloop.stack import gotools

    gotools.main(list(names))


if __name__ == "__main__":
    main()
