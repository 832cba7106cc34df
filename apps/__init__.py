"""The zactors command line, sample apps and embedding examples."""
