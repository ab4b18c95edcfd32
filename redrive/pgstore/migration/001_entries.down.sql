DROP TABLE redrive_entries;
