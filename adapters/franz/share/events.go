package share

import "time"

// EventKind says what an [Event] reports.
type EventKind uint8

// The kinds of events, in the order a record meets them.
const (
	// Acquired: a poll handed the record to the lane, with the broker's
	// delivery count.
	Acquired EventKind = iota + 1
	// Handled: a handler call of the record returned (OK: it succeeded,
	// or a RetryResult's retries are spent), or was cancelled (OK false).
	Handled
	// Held: the record is held for a retry due at At.
	Held
	// ActionDone: the record's exhaustion action succeeded.
	ActionDone
	// Accepted, Rejected, Released: the lane's final acknowledgement.
	Accepted
	Rejected
	Released
)

// Event reports what a lane did with one record, for tests and audits
// (streamtest.ShareHistory checks a history of them).
type Event struct {
	Kind          EventKind
	Member        string // "<lane>" of this consumer
	Topic         string
	Partition     int32
	Offset        int64
	DeliveryCount int       // Acquired
	OK            bool      // Handled
	Start         time.Time // Handled: when the handler was called
	At            time.Time // Held: when the retry is due
}

// WithEvents calls fn with every event of every lane. fn must be fast and
// safe for concurrent use; it is called on the lanes' goroutines.
func WithEvents(fn func(Event)) Option { return optionFunc(func(c *config) { c.events = fn }) }

// event reports an event about it, when events are wanted.
func (l *lane) event(k EventKind, ls *lease, mod func(*Event)) {
	fn := l.c.cfg.events
	if fn == nil {
		return
	}
	e := Event{Kind: k, Member: l.name, Topic: ls.rec.Topic, Partition: ls.rec.Partition, Offset: ls.rec.Offset}
	if mod != nil {
		mod(&e)
	}
	fn(e)
}
