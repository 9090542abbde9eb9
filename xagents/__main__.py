"""``python -m xagents ...``: the command line, as the installed ``xagents`` command."""
from xagents.app.command import main

main()
