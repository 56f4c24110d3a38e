"""`python -m benchmarks.reliability`: run the reliability benchmark (see `benchmarks.reliability.run`)."""

from benchmarks.reliability.run import main

if __name__ == "__main__":  # not again in a child process that re-imports the main module
    main()
