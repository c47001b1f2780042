"""The elastic pools' edge in the service: control loop, hooks, metrics (docs/elastic.md)."""
