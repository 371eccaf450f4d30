from palm_search.commands.cli import main

main()
