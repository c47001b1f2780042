"""The Berth service: FastAPI app, auth, metrics, and the replica state kept in sync."""
