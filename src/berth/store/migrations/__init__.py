"""Alembic migrations of the Berth schema (`berth db upgrade`)."""
