"""Pool definitions: a pool of identifiers kept in its key's partition."""

from __future__ import annotations

from projections.emitter import Emitter, missing_pool
from projections.pools import PoolState
from projections.state import PartitionState
from schemas.events import PoolDefined
from schemas.outcomes import Code, Kind, Reason
from schemas.pool_space import PoolSpace


def pool_defined(state: PartitionState, event: PoolDefined, out: Emitter) -> None:
    pid = event.pool_id
    reason = missing_pool(state, pid)
    if reason.code == Code.POOL_WRONG_PARTITION:
        out.emit(Kind.REJECTED, pid, (reason,))
        return
    pool = state.pools.get(pid)
    if pool is not None and pool.taken:
        taken = Reason(Code.POOL_IN_USE, pid, detail=f"{pool.taken} identifiers taken")
        out.emit(Kind.REJECTED, pid, (taken,))
        return
    state.pools[pid] = PoolState.of(pid, PoolSpace.of(event))
    state.pools_touched.add(pid)
    out.emit(Kind.APPLIED, pid)
