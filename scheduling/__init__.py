"""Placement engine: filters, weighers and grammars over a snapshot of providers."""
