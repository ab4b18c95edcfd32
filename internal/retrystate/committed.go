package retrystate

import "fmt"

// AppliesTo reports whether s is the retry state of the record at offset
// at: whether it names that record, or names none (metadata written before
// states named their record). A state committed with a checkpoint counts
// the retries of one record; applied to another, it would give that record
// a count it never earned, so every reader of committed metadata (the
// engine, the host's status page, the command line, the history checker)
// applies a state only where AppliesTo holds.
func (s State) AppliesTo(at int64) bool { return s.Offset < 0 || s.Offset == at }

// OtherRecordError is what [ReadCommitted] returns for a retry state that
// names another record than the one at the checkpoint it was committed
// with. A reader ignores such a state: the record at the checkpoint starts
// its count over.
type OtherRecordError struct {
	Checkpoint int64 // the offset committed with the state
	Offset     int64 // the record the state names
}

func (e *OtherRecordError) Error() string {
	return fmt.Sprintf("checkpoint: the retry state belongs to the record at offset %d, not to the one at the checkpoint (%d)", e.Offset, e.Checkpoint)
}

// ReadCommitted reads the metadata md committed with the checkpoint at as
// the engine does, and returns the retry state it holds for the record at
// the checkpoint. Empty metadata, or a state that holds nothing but an
// offset, is the State of no retry for the record at the checkpoint.
// Metadata of another tool returns [ErrForeignMetadata], damaged metadata
// an error that says what is wrong, and a state of another record an
// [*OtherRecordError]; each with the zero State, which is what a reader
// applies.
func ReadCommitted(at int64, md string) (State, error) {
	s, err := DecodeState(md)
	if err != nil {
		return State{}, err
	}
	if s == (State{Offset: s.Offset}) {
		return State{Offset: at}, nil
	}
	if !s.AppliesTo(at) {
		return State{}, &OtherRecordError{Checkpoint: at, Offset: s.Offset}
	}
	return s, nil
}
