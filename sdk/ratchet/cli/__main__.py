"""`python -m ratchet.cli` is the `ratchet` command."""

import sys

from ratchet.cli.main import main

sys.exit(main())
