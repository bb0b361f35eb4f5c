import sys

from slidingwindow.cli import main

sys.exit(main())
