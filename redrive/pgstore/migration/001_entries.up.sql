-- Parked entries of redeliver's re-drive (see the redrive package).
CREATE TABLE redrive_entries (
    id         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    key        text        NOT NULL UNIQUE,
    base       text        NOT NULL,
    status     text        NOT NULL CHECK (status IN ('parked', 'retrying', 'done', 'timed_out')),
    state      text        NOT NULL,
    state_time timestamptz NOT NULL,
    created    timestamptz NOT NULL,
    expiry     bigint      NOT NULL, -- nanoseconds
    due_at     timestamptz,          -- NULL once done or timed out
    redrives   integer     NOT NULL DEFAULT 0,
    last_error text        NOT NULL DEFAULT '',
    version    bigint      NOT NULL DEFAULT 1,
    topic      text        NOT NULL,
    partition  integer     NOT NULL,
    "offset"   bigint      NOT NULL,
    msg_key    bytea,
    msg_value  bytea,
    headers    jsonb,
    msg_time   timestamptz
);

CREATE INDEX redrive_entries_due ON redrive_entries (due_at, id) WHERE due_at IS NOT NULL;
CREATE INDEX redrive_entries_state ON redrive_entries (state);
