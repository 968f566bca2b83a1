import sys

from queuepilot.cli import main

sys.exit(main())
