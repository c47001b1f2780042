"""Persistence: SQLAlchemy schema, Alembic migrations, and the repository used by the service."""
