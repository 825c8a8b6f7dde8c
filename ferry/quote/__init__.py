"""The migration quote: what a plan would copy, send, cost and take, known before anything moves.

`estimate.py` merges the data_sync phase's dry runs (the run's own diff and route decisions) into the figures a
change board asks for; `ferry plan estimate` prints them, and writes them where `ferry plan show` finds them.
"""
