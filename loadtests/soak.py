"""``python -m loadtests.soak``: the same as ``kronos soak`` (``service/soak.py``): a long
steady locust run against a local service, memory/FD sampling of every service process, and
with ``--chaos-every N`` a random predictor replica killed every N seconds.

    python -m loadtests.soak --duration 600 --users 3 --symbols 100 --out loadtests/results/soak-plain
    python -m loadtests.soak --duration 600 --users 3 --symbols 100 --chaos-every 60 \\
        --out loadtests/results/soak-chaos
"""

import sys

from service.soak import main

if __name__ == "__main__":
    sys.exit(main())
