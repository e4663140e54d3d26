"""The frozen bundle's entry point: the same ``app.main.main`` that ``rl-swarm`` and ``python -m app`` run."""

import sys

from app.main import main

sys.exit(main())
