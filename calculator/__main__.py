import sys

from calculator.cli import main

sys.exit(main())
