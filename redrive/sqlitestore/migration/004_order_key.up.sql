-- The order key of an entry (redrive.Entry.OrderKey): a claim never takes
-- an entry while an entry of the same order key with a lower ID is
-- pending. Entries written before it get '' and order nothing, as before.
ALTER TABLE redrive_entries ADD COLUMN order_key TEXT NOT NULL DEFAULT '';
-- The pending entries of each order key, for the claim's check and for
-- redrive.KeyLocker.KeyLocked; and by partition, for LockedKeys.
CREATE INDEX redrive_entries_order ON redrive_entries (order_key, id)
    WHERE order_key <> '' AND status IN ('parked', 'retrying');
CREATE INDEX redrive_entries_locks ON redrive_entries (topic, partition, order_key)
    WHERE order_key <> '' AND status IN ('parked', 'retrying');
