from testbed.cli import main

main()
