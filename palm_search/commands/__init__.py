"""The palm-search command line: typer commands, thin adapters over the search and the views."""
