"""Fault injection: PostgreSQL stopped and restarted under running roles, and database
links that hang or reset through a TCP proxy. ``soak/`` uses the same tools."""
