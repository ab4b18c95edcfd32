-- Parked entries of redeliver's re-drive (see the redrive package).
-- Times are Unix microseconds, expiry is nanoseconds.
CREATE TABLE redrive_entries (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    key        TEXT    NOT NULL UNIQUE,
    base       TEXT    NOT NULL,
    status     TEXT    NOT NULL CHECK (status IN ('parked', 'retrying', 'done', 'timed_out')),
    state      TEXT    NOT NULL,
    state_time INTEGER NOT NULL,
    created    INTEGER NOT NULL,
    expiry     INTEGER NOT NULL,
    due_at     INTEGER,
    redrives   INTEGER NOT NULL DEFAULT 0,
    last_error TEXT    NOT NULL DEFAULT '',
    version    INTEGER NOT NULL DEFAULT 1,
    topic      TEXT    NOT NULL,
    partition  INTEGER NOT NULL,
    "offset"   INTEGER NOT NULL,
    msg_key    BLOB,
    msg_value  BLOB,
    headers    TEXT,
    msg_time   INTEGER
);

CREATE INDEX redrive_entries_due ON redrive_entries (due_at, id) WHERE due_at IS NOT NULL;
