"""The one test and benchmark harness: free ports, starting and stopping processes, the servers the tests
and benchmarks run against (ours, the reference ones, redis-server, haproxy), and Dilation peers.

tests/ and bench/ import it; it imports nothing from either. It is not installed with burrow.
"""
