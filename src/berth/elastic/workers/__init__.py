"""Batch workers: the batch daemon standing for one elastic VM (`base.BatchWorker`)."""
