"""The search: an Optuna study owned by one driver (or RDB workers); candidates are evaluated
by the simulator in joblib worker processes."""
