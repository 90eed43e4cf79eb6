from fuserc.cli import main

main()
