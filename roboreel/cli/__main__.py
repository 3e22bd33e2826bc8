"""``python -m roboreel.cli``: the same as the ``roboreel`` console script."""

import sys

from roboreel.cli import main

sys.exit(main())
