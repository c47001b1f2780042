"""The multi-cloud scheduling layer above the placement core (Ultron's pipeline, B1-B8, B11).

Pure like the core: no I/O and no clock (time is passed in). Files are read by
`berth.policy.loader` at the edge.
"""
