"""``python -m cusoftmax.bench``."""

import sys

from . import main

sys.exit(main())
