"""``python -m pycomm ...``: the same as the ``pycomm`` command (pycomm/cli.py)."""
from .cli import main

raise SystemExit(main())
