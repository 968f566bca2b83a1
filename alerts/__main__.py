import sys

from alerts.cli import main

sys.exit(main(sys.argv[1:]))
