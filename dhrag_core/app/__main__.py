"""``python -m dhrag_core.app``: the ``dhrag`` command."""

from dhrag_core.app.launch import main

raise SystemExit(main())
