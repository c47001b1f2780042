"""The edge between Berth and the clouds it drives (docs/architecture.md, "cloud").

`driver.CloudDriver` is the one small interface every cloud implements: Berth's service, the
elastic pools, defrag execution and tidal power management call it and nothing else.
"""
