"""OpenStack Placement's HTTP API served from Berth's ledger (issue 32):
``berth serve --placement-api HOST:PORT``. Every write is a Placement event
decided by the partition writers (``projections.placement``); every read is
the view. See docs/placement.md for what is supported."""

from berth.placement_api.app import create_app
from berth.placement_api.service import PlacementService

__all__ = ["PlacementService", "create_app"]
