"""A seeded simulator of the whole system (TigerBeetle's VOPR is the model).

The real components (the writers, the scheduler, its batches and their
coordinator, the reaper) run in one process on a simulated log
(:mod:`sim.log`) and clock (:mod:`sim.system`), stepped by one seeded
random generator (:mod:`sim.run`): no threads, no wall clock, no sleeps, so
a seed is a run. Faults come at rates; the invariants (:mod:`sim.invariants`)
are checked after every step. ``python -m sim --seed N --steps M`` replays
a run; see docs/simulation.md.
"""
