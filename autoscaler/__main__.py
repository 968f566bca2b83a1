import sys

from autoscaler.controller.cli import main

sys.exit(main(sys.argv[1:]))
