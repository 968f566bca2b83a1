import sys

from autoscaler.controller_cli import main

sys.exit(main(sys.argv[1:]))
