from kubenexus.cli import main

main()
