-- 0019_guard_counts: a new reservation of a guarded key is added to its
-- guard counters by the store, in one multi-row statement in the same
-- transaction (sqlite/guard_plan.go addCounters), instead of by a trigger
-- reading the reservation's counted JSON: parsing it cost a charge on a
-- guarded key about as much as every guard's read. counted is still
-- recorded, and reservations_guard_update still takes a reservation out
-- of its counters when it is released and back when it is re-armed.
DROP TRIGGER reservations_guard_insert;
