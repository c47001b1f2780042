"""Berth: VM placement and capacity control plane for private clouds."""

__version__ = "0.1.0"
