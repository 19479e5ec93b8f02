"""The modules of bench/run (the driver): common, stats, traces, plots, report, runs."""
