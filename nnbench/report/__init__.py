"""Reports of result files, generic over workloads: the terminal tables, PNG plots, the
self-contained HTML page and the gate's markdown/JSON/JUnit report."""
