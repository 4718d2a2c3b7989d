"""``python -m cloudloop.cli``: the ``cloudloop`` command."""

from cloudloop.cli import main

main()
