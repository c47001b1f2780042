"""Queue watchers: one `QueueWatcher` protocol (`base`), one adapter per batch system."""
