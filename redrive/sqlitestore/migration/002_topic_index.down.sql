DROP INDEX redrive_entries_topic;
