"""``python -m slash`` runs the ``slash`` command (see :mod:`slash.cli`)."""
import sys

from slash.cli import main

sys.exit(main())
