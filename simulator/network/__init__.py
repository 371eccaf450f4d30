"""The network: topology (routes and resources) and the backends that time traffic on it."""
