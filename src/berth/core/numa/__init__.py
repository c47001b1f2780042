"""NUMA-exact count and placement: the claim rule (`rule`) and its implementations."""
