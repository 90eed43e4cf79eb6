from fuserc.cli import entry

entry()
