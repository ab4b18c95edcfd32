-- Fails, changing nothing, while an entry's last error is not valid UTF-8
-- or holds a NUL: text cannot hold it.
ALTER TABLE redrive_entries ALTER COLUMN last_error DROP DEFAULT;
ALTER TABLE redrive_entries ALTER COLUMN last_error TYPE text USING convert_from(last_error, 'UTF8');
ALTER TABLE redrive_entries ALTER COLUMN last_error SET DEFAULT '';
ALTER TABLE redrive_entries DROP COLUMN reparked_number;
ALTER TABLE redrive_entries DROP COLUMN reparks;
