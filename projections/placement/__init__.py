"""OpenStack Placement's model, decided by the writer of the partition that
holds it (``schemas.events.PLACEMENT_KEY``'s): resource provider trees with
their generations, custom resource classes and traits, inventories,
aggregates and consumers with their allocations (issue 32).

A Placement provider is also a Berth provider of that partition (the same
id, inventory and capacity), and a consumer's allocations are counted in
its ``consumed``: Berth's reservations and Placement's allocations share one
capacity view."""
