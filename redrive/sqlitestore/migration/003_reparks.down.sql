ALTER TABLE redrive_entries DROP COLUMN reparked_number;
ALTER TABLE redrive_entries DROP COLUMN reparks;
