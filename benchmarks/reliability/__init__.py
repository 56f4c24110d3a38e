"""The reliability benchmark: tried / held / failed per probe under faults and hostile input.

Run it from the repository root with `python -m benchmarks.reliability` (see `run`); each probe
is a module here: `env` (a), `server` (b), `damage` and `writes` (c), `resume` (d), `scoring` (e),
and `tally` holds the table row they all fill.
"""
