"""Published measurements the validation suites compare against, filed by source and table
(``<source>/<table>/data.csv`` with a ``SOURCE.md``); installed as ``palm_search.validation_data``."""
