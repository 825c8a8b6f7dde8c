"""The `ferry` command line as a user meets it."""
