-- Reparks counts the re-drives of an entry whose record failed again and
-- was handed back to it (redrive.Store.Repark); reparked_number is the
-- highest re-drive number counted, so that a re-drive handed back twice
-- counts once.
ALTER TABLE redrive_entries ADD COLUMN reparks integer NOT NULL DEFAULT 0;
ALTER TABLE redrive_entries ADD COLUMN reparked_number integer NOT NULL DEFAULT 0;

-- An error may hold any bytes (one that quotes a binary payload): text
-- refuses a NUL and invalid UTF-8, bytea keeps them.
ALTER TABLE redrive_entries ALTER COLUMN last_error DROP DEFAULT;
ALTER TABLE redrive_entries ALTER COLUMN last_error TYPE bytea USING convert_to(last_error, 'UTF8');
ALTER TABLE redrive_entries ALTER COLUMN last_error SET DEFAULT ''::bytea;
