from palm_search.cli import main

main()
