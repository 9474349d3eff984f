"""``python -m pycomm ...``: the same as the ``pycomm`` command (pycomm/tools/cli.py)."""
from .tools.cli import main

raise SystemExit(main())
