import sys

from exporter.cli import main

sys.exit(main(sys.argv[1:]))
