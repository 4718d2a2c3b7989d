"""The dev stack's commands, added to ``cloudloop`` through the ``cloudloop.commands`` entry point.

``dev`` runs everything on the embedded local stack, ``status`` shows it, ``inject`` sends cloud
events into its demo and ``stack build`` builds the Go tools. Only ``make setup`` installs them.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import click

from cloudloop.cloud.registry import Settings
from devstack.demos import DEMOS

DEFAULT_STATE = Path(".cloudloop/state")


def register(group: click.Group) -> None:
    """Add the dev stack's commands to the ``cloudloop`` group."""

    @group.command()
    @click.option(
        "--state-dir", type=click.Path(path_type=Path), default=DEFAULT_STATE, show_default=True
    )
    @click.option("--temporal-port", type=int, default=7233, show_default=True)
    @click.option("--ui-port", type=int, default=8233, show_default=True)
    @click.option(
        "--provider",
        type=click.Choice(sorted(DEMOS)),
        default="aws",
        show_default=True,
        help="The cloud the demo emulates.",
    )
    @click.option(
        "--keep-state",
        is_flag=True,
        help="Reuse the state folder (etcd, Temporal history) instead of starting fresh; moto's "
        "cloud is always new, so keep it only to look at earlier workflows.",
    )
    @click.option(
        "--workers",
        type=click.IntRange(min=1),
        default=2,
        show_default=True,
        help="`cloudloop worker` processes, as the chart's Deployment runs them; one that dies "
        "is started again.",
    )
    def dev(
        state_dir: Path,
        temporal_port: int,
        ui_port: int,
        provider: str,
        keep_state: bool,
        workers: int,
    ) -> None:
        """Bring up the embedded local stack with workers, starters and a demo; Ctrl-C stops all."""
        from devstack.devmode import run_dev

        asyncio.run(
            run_dev(
                state_dir.resolve(),
                temporal_port=temporal_port,
                ui_port=ui_port,
                fresh=not keep_state,
                provider=provider,
                workers=workers,
            )
        )

    @group.command()
    @click.option(
        "--state-dir", type=click.Path(path_type=Path), default=DEFAULT_STATE, show_default=True
    )
    def status(state_dir: Path) -> None:
        """Show what a running `cloudloop dev` (or the configured cluster) looks like."""
        from devstack.devmode import print_status

        settings = Settings()
        stack_file = state_dir / "stack.json"
        stack = json.loads(stack_file.read_text()) if stack_file.exists() else None
        ok = asyncio.run(print_status(settings, stack))
        sys.exit(0 if ok else 1)

    @group.group()
    def inject() -> None:
        """Inject cloud events into a running `cloudloop dev` demo."""

    @inject.command("spot-interruption")
    @click.option(
        "--state-dir", type=click.Path(path_type=Path), default=DEFAULT_STATE, show_default=True
    )
    @click.option("--node", help="The demo Node to interrupt (default: the first).")
    def inject_spot_interruption(state_dir: Path, node: str | None) -> None:
        """Send an EC2 Spot interruption warning for a demo node to the demo's SQS queue."""
        from devstack.demos.aws import inject_spot_interruption as send

        click.echo(send(state_dir, node))

    @group.group()
    def stack() -> None:
        """The embedded local stack's Go tools (and the real Keystone of the identity tests)."""

    @stack.command("build")
    @click.argument("names", nargs=-1)
    def stack_build(names: tuple[str, ...]) -> None:
        """Build (or find cached) stack binaries and print their paths."""
        from devstack import gotools

        gotools.main(list(names))

    @stack.command("keystone")
    def stack_keystone() -> None:
        """Install and initialise the real Keystone of the identity tests (cached); print where."""
        from devstack import keystone

        venv, state = keystone.ensure_installed()
        click.echo(f"{venv}\n{state}")
