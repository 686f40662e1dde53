"""Vendors of temporary, location-scoped cloud credentials (one module per cloud)."""
