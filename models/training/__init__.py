"""One training loop for every student method, driven by a method name and a config."""
