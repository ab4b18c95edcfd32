DROP INDEX redrive_entries_locks;
DROP INDEX redrive_entries_order;
ALTER TABLE redrive_entries DROP COLUMN order_key;
