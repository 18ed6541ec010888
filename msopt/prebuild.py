"""``python -m msopt.prebuild``: compile the planner's loops ahead of time into msopt/_loops (msopt.compiled.prebuild)."""

import sys

from msopt.compiled.prebuild import main

if __name__ == "__main__":
    sys.exit(main())
