"""``python -m tensorgym ...``: the ``tensorgym`` command, where its script is not on PATH."""
import sys

from .cli import main

sys.exit(main())
