"""The CLI's help is a user-facing contract: moving code between the CLI's modules leaves it
byte for byte as it was (the golden text ``cli_help.txt``)."""

from __future__ import annotations

from cloudloop.cli import main
from tests.platform.cli_help import GOLDEN, command_paths, render


def test_every_commands_help_is_the_golden_text() -> None:
    assert render() == GOLDEN.read_text()


def test_the_golden_text_covers_every_product_group() -> None:
    groups = {path[0] for path in command_paths(main) if path}

    assert {
        "worker", "starter", "csi-controller", "csi-node", "termination-imds", "codec-server",
        "termination", "temporal", "retry", "nodegroup", "layout",
    } <= groups  # fmt: skip
