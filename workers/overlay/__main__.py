"""``python -m workers.overlay``: what spawn() and attach() run (see cli.py)."""

from workers.overlay.cli import main

raise SystemExit(main())
