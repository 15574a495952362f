from jobgate.cli import main

main()
