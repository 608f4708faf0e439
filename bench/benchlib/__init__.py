"""What the benchmark scripts in bench/ share; each module is named for what it holds."""
