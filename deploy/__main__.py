"""`python -m deploy` is the `pyk8s` command without the installed script."""

from deploy.cli import main

main()
