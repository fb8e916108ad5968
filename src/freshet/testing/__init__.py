"""What only tests and benchmarks use: the fuzzer, crash-test readers, a Redis server for the CDC tests.
Product code never imports this package (an import-linter contract says so)."""
