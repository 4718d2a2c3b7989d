"""The ``cloudloop`` group and what every command group shares: logging, durations, the codec
check and the exit that skips the Temporal SDK's finalization.

Rules: nothing here imports a command group; the groups import this module.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

import click

from cloudloop.cloud.registry import Settings

F = TypeVar("F", bound=Callable[..., Any])
LOG_FORMATS = ("text", "json")


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``ts``, ``level``, ``logger``, ``msg`` (and ``exc``)."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": self.formatTime(record, "%Y-%m-%dT%H:%M:%S"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry)


def configure_logging(verbose: bool, log_format: str = "text") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        JsonFormatter()
        if log_format == "json"
        else logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s")
    )
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO, handlers=[handler], force=True
    )
    # keystoneauth logs request bodies at DEBUG (a server's user_data among them)
    quiet = ("keystoneauth", "leaderelection", "temporalio.activity")
    for noisy in ("urllib3", "botocore", "kubernetes", *quiet):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def reconfigure_logging(log_format: str | None) -> None:
    """A process command's own ``--log-format``, keeping the group's ``--verbose``."""
    if log_format is not None:
        obj = click.get_current_context().find_root().obj or {}
        configure_logging(bool(obj.get("verbose")), log_format)


@click.group()
@click.version_option(package_name="cloudloop", prog_name="cloudloop")
@click.option("-v", "--verbose", is_flag=True, help="Debug logging.")
@click.option(
    "--log-format", type=click.Choice(LOG_FORMATS), default="text", help="Log lines [text]."
)
@click.pass_context
def main(ctx: click.Context, verbose: bool, log_format: str) -> None:
    """cloudloop: Kubernetes cloud-provider integration on Temporal workflows."""
    ctx.obj = {"verbose": verbose}
    configure_logging(verbose, log_format)


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float:
    """A Go-style duration (``5s``, ``5m0s``, ``1h30m``, ``500ms``) in seconds."""
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise click.BadParameter(f"not a duration: {text!r} (use e.g. 5s, 5m, 1h30m)")
    return sum(float(n) * _UNIT_S[u] for n, u in parts)


class Duration(click.ParamType[float]):
    name = "duration"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        return value if isinstance(value, float) else parse_duration(str(value))


def require_codec(settings: Settings) -> None:
    """Stop with a clear error (and a log line) when the payload codec is on without its keys:
    a process that talks to Temporal never writes plaintext histories by accident."""
    from cloudloop.codec import CodecConfigError, key_ring

    try:
        key_ring(settings.temporal.codec)
    except CodecConfigError as exc:
        logging.getLogger("cloudloop.codec").error("refusing to start: %s", exc)
        raise click.ClickException(str(exc)) from None


def leave(code: int) -> NoReturn:
    """Exit without finalizing the interpreter: the Temporal SDK's core threads may still call
    into Python while it finalizes (an abort at exit, as ``temporal setup`` found)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def refused_exits(run: Callable[[], None]) -> None:
    """Run a process; another cluster's claim on its queues ends it with the error, code 1."""
    from cloudloop.claim import ClaimRefused

    try:
        run()
    except ClaimRefused as exc:
        click.echo(f"Error: {exc}", err=True)
        leave(1)
