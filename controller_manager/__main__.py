import sys

from controller_manager.app import main

sys.exit(main())
