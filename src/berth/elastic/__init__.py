"""Elastic worker pools: VMs started and retired by each science group's batch queue.

The model (`model`) and the decision function (`controller`) are pure; the queue watchers, the
batch workers, the agent and the loop that runs the controller are edges (docs/elastic.md).
"""
