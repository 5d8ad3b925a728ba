"""``python -m berth.cli``: the ``berth`` command."""

import sys

from berth.cli import main

sys.exit(main())
