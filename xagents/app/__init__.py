"""What the commands do: the command line, its flags, tuning (search space, study, search) and benchmarks."""
