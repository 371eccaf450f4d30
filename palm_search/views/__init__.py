"""What a run shows: terminal tables, pictures, the HTML report, trials.csv and best.json."""
