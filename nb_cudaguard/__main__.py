import sys

from nb_cudaguard.cli.main import main

sys.exit(main())
