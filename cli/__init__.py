"""The `rankserve` command line: one module per subcommand."""
