"""Offline helpers (fixture generators, converters) that are not part of serving."""
