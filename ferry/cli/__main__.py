"""`python -m ferry.cli`: the `ferry` command."""

from ferry.cli import run

if __name__ == "__main__":
    run()
