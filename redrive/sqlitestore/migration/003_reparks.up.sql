-- Reparks counts the re-drives of an entry whose record failed again and
-- was handed back to it (redrive.Store.Repark); reparked_number is the
-- highest re-drive number counted, so that a re-drive handed back twice
-- counts once.
ALTER TABLE redrive_entries ADD COLUMN reparks INTEGER NOT NULL DEFAULT 0;
ALTER TABLE redrive_entries ADD COLUMN reparked_number INTEGER NOT NULL DEFAULT 0;
