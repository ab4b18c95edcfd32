-- Listing the entries of one topic (an operator's tool, a host's status
-- page) reads this index instead of the whole table.
CREATE INDEX redrive_entries_topic ON redrive_entries (topic, id);
