"""``python -m loadtests.run``: the older spelling of ``kronos loadtest`` (``service/loadtest.py``)."""

import sys

from service.loadtest import main

if __name__ == "__main__":
    sys.exit(main())
