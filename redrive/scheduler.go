package redrive

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/redeliver-go/redeliver/internal/lifecycle"
	"github.com/redeliver-go/redeliver/stream"
)

// The headers a re-driven record carries besides its own, with
// [stream.HeaderTopic], [stream.HeaderPartition] and [stream.HeaderOffset]
// naming where the original record came from. A reply record also carries
// [HeaderErrorCode] and [stream.HeaderError] (the reason).
//
// Re-publishing is at least once: a consumer that must not act twice keeps
// the pair (HeaderKey, HeaderNumber) it has handled and drops a record whose
// pair it has seen.
const (
	HeaderKey       = "redeliver-redrive-key"    // the entry's key
	HeaderNumber    = "redeliver-redrive-number" // the re-drive's number, from 1
	HeaderState     = "redeliver-redrive-state"  // the state it was re-driven from, e.g. NONCE_PUBLISHED
	HeaderErrorCode = "redeliver-error-code"     // on reply records: the scheduler's error code
)

// Scheduler re-drives due entries every interval (the design's retry
// processor):
//
//   - a parked entry whose expiry has passed since it entered its state is
//     re-published (its original record, with the Header* headers) to the
//     retry topic, or to its own topic when there is none, and marked
//     retrying;
//   - a retrying entry whose expiry has passed again is re-published again,
//     unless the retry timeout has passed since its creation or it was
//     re-driven the maximum number of times: then it is reported (a record
//     to the reply topic with an error code, and the TimedOut hook) and
//     marked timed out.
//
// Each batch of due entries is claimed, published and then marked with a
// compare-and-set on the status and version read, so several schedulers on
// one store share the work and a completion that lands meanwhile is never
// overwritten. An entry's new state time is read from the clock after its
// publish returned, so its expiry counts from its publication however long
// the sweep takes, and no sweep handles an entry twice.
//
// Re-publishing is at least once. A record is published again, with the
// same [HeaderNumber], when the process dies or the store fails between
// the publish and the mark (the entries are still due and the next sweep,
// of any scheduler, publishes them again), when the scheduler is stopped
// during a publish (the records not acknowledged yet may have been
// written), and when a publish fails for a record that the broker wrote
// all the same (an acknowledgement lost, or a publisher that cannot say
// which records of a failed call were written: see
// [stream.PublishError]). Nothing else publishes an entry twice for one
// due time.
//
// The scheduler never stops on a failure: a store error ends the sweep (it
// is logged and reported to the StoreFailed hook) and the next sweep starts
// over; an entry that cannot be published is reported to the Failed hook,
// keeps its state, and waits one interval before it is tried again, so a
// topic that is gone costs one attempt per interval until the retry timeout
// reports the entry.
//
// A Scheduler is safe for concurrent use, though one Run per Scheduler is
// the intended use. The zero Scheduler is not ready: build it with
// [NewScheduler].
type Scheduler struct {
	store Store
	pub   stream.Publisher
	cfg   config
	log   *slog.Logger
	life  *lifecycle.Life
}

// errZero is what the methods of a Scheduler not built by NewScheduler
// return.
var errZero = errors.New("redrive: the Scheduler was not built by redrive.NewScheduler(store, publisher, options...): it has no store to sweep")

// NewScheduler returns a Scheduler over store that publishes through pub
// (such as franz.NewPublisher or kafkago.NewPublisher). It returns an error
// for a nil store or publisher or an option out of range.
func NewScheduler(store Store, pub stream.Publisher, opts ...Option) (*Scheduler, error) {
	if isNil(store) {
		return nil, errors.New("redrive: NewScheduler: nil store: open one with sqlitestore.Open or pgstore.Open")
	}
	if isNil(pub) {
		return nil, errors.New("redrive: NewScheduler: nil publisher: give one such as franz.NewPublisher(client)")
	}
	c, err := newConfig("NewScheduler", opts)
	if err != nil {
		return nil, err
	}
	switch {
	case c.interval <= 0:
		return nil, fmt.Errorf("redrive: interval %v: want more than 0", c.interval)
	case c.retryTimeout <= 0:
		return nil, fmt.Errorf("redrive: retry timeout %v: want more than 0", c.retryTimeout)
	case c.maxRedrives < 0:
		return nil, fmt.Errorf("redrive: maximum re-drives %d: want 0 (no limit) or more", c.maxRedrives)
	case c.batchSize <= 0:
		return nil, fmt.Errorf("redrive: batch size %d: want more than 0", c.batchSize)
	}
	c.interval, c.retryTimeout = ceil(c.interval), ceil(c.retryTimeout)
	return &Scheduler{store: store, pub: pub, cfg: c, log: c.logger,
		life: lifecycle.New("redrive", fmt.Errorf("redrive: scheduler %w", stream.ErrClosed))}, nil
}

// Run sweeps at once and then every interval, until ctx is done or Close
// is called. It returns nil after a clean shutdown by ctx, [stream.ErrClosed]
// when Close came first, and an error only when it cannot run at all (a
// Scheduler not built by [NewScheduler], a nil context, a second Run):
// failures of a sweep never stop it (see [Scheduler]).
func (s *Scheduler) Run(ctx context.Context) error {
	if s == nil || s.store == nil {
		return errZero
	}
	if ctx == nil {
		return errors.New("redrive: Scheduler.Run: nil context")
	}
	return s.life.Run(ctx, s.run)
}

// Close stops Run, after the sweep under way (whose store and publisher
// calls see their context cancelled), and waits for it to return, unless
// it is called from within Run's sweep (a hook): then it returns at once.
// It may be called more than once and from any goroutine; a Run after
// Close returns [stream.ErrClosed] at once.
func (s *Scheduler) Close() error {
	if s == nil || s.store == nil {
		return errZero
	}
	s.life.Close()
	return nil
}

func (s *Scheduler) run(ctx context.Context) error {
	for {
		start := s.cfg.clock.Now()
		s.Sweep(ctx) // failures are logged and reported by Sweep
		if ctx.Err() != nil {
			return nil
		}
		wait := s.cfg.interval - s.cfg.clock.Now().Sub(start)
		if wait <= 0 {
			continue
		}
		ch, stop := s.cfg.clock.NewTimer(wait)
		select {
		case <-ch:
		case <-ctx.Done():
			stop()
			return nil
		}
	}
}

// now is the time by the scheduler's clock, to the stores' resolution.
func (s *Scheduler) now() time.Time { return s.cfg.clock.Now().Truncate(Resolution) }

// Sweep does one sweep now: it claims, re-drives or times out every entry
// due at the time it starts, a batch at a time, and reports what it did.
// Its Err is the store error that ended it early, or nil.
func (s *Scheduler) Sweep(ctx context.Context) SweepEvent {
	if s == nil || s.store == nil {
		return SweepEvent{Err: errZero}
	}
	if ctx == nil {
		return SweepEvent{Err: errors.New("redrive: Scheduler.Sweep: nil context")}
	}
	start := s.cfg.clock.Now()
	now := start.Truncate(Resolution)
	ev := SweepEvent{At: now}
	seen := map[int64]bool{}
	for ctx.Err() == nil {
		b := sweepBatch{seen: seen}
		claimed, applied, err := s.store.Claim(ctx, now, s.cfg.batchSize, func(ctx context.Context, due []Entry) []Change {
			return b.handle(ctx, s, now, due)
		})
		ev.Claimed += claimed
		if err != nil {
			ev.Err = err
			if ctx.Err() == nil {
				s.log.Error("redrive: sweep failed; the next sweep tries again", "error", err)
				s.cfg.each(func(h Hooks) {
					if h.StoreFailed != nil {
						h.StoreFailed(ev)
					}
				})
			}
			break
		}
		b.report(s, applied, &ev)
		if b.again > 0 {
			// A store that hands out an entry this sweep changed already
			// (its new due time at or before the sweep's): stop here
			// rather than publish it twice; the next sweep goes on.
			s.log.Warn("redrive: entries this sweep changed are due again already (requeued meanwhile?); the sweep stops here, the next one takes them", "entries", b.again)
			break
		}
		if claimed < s.cfg.batchSize {
			break
		}
	}
	ev.Duration = s.cfg.clock.Now().Sub(start)
	if ev.Claimed > 0 || ev.Err != nil {
		s.log.Info("redrive: sweep", "claimed", ev.Claimed, "redriven", ev.Redriven, "timedOut", ev.TimedOut,
			"failed", ev.Failed, "lost", ev.Lost, "duration", ev.Duration)
	}
	s.cfg.each(func(h Hooks) {
		if h.Swept != nil {
			h.Swept(ev)
		}
	})
	return ev
}

// sweepBatch is one claimed batch: the entries by ID and the failure
// behind each failed change.
type sweepBatch struct {
	seen   map[int64]bool // the entries of the sweep's earlier batches
	again  int            // entries of this batch seen in an earlier one
	byID   map[int64]Entry
	errs   map[int64]error
	failed int
}

func (b *sweepBatch) handle(ctx context.Context, s *Scheduler, now time.Time, due []Entry) []Change {
	b.byID = make(map[int64]Entry, len(due))
	b.errs = map[int64]error{}
	var redrive, timeout []Entry
	reasons := map[int64]string{}
	for _, e := range due {
		if b.seen[e.ID] {
			b.again++
			continue
		}
		b.seen[e.ID] = true
		b.byID[e.ID] = e
		switch reason := s.timeoutReason(e, now); {
		case !e.Status.Pending():
			// not ours to change: the store should not have claimed it
		case reason != "":
			reasons[e.ID] = reason
			timeout = append(timeout, e)
		default:
			redrive = append(redrive, e)
		}
	}
	changes := make([]Change, 0, len(due))

	// Re-drive, one publish per target topic.
	groups := map[string][]Entry{}
	var topics []string
	for _, e := range redrive {
		t := s.cfg.retryTopic
		if t == "" {
			t = e.Message.Topic
		}
		if _, ok := groups[t]; !ok {
			topics = append(topics, t)
		}
		groups[t] = append(groups[t], e)
	}
	for _, topic := range topics {
		es := groups[topic]
		recs := make([]stream.Record, len(es))
		for i, e := range es {
			recs[i] = redriveRecord(topic, e, e.Redrives+1, nil)
		}
		err := s.pub.Publish(ctx, topic, recs)
		at := s.after(now)
		errs := recordErrors(err, len(es))
		for i, e := range es {
			switch {
			case errs[i] == nil:
				changes = append(changes, s.retrying(e, at))
			case ctx.Err() != nil:
				// Unknown whether published: due again next sweep.
			case !at.Before(e.Created.Add(s.cfg.retryTimeout)):
				reasons[e.ID] = fmt.Sprintf("retry timeout %v passed since it was parked; last error: re-publish to %s: %v", s.cfg.retryTimeout, topic, errs[i])
				timeout = append(timeout, e)
			default:
				changes = append(changes, b.fail(s, e, at, fmt.Errorf("re-publish to %s: %w", topic, errs[i])))
			}
		}
		if ctx.Err() != nil {
			return changes
		}
	}

	// Report and time out.
	if len(timeout) > 0 {
		var err error
		if s.cfg.replyTopic != "" {
			recs := make([]stream.Record, len(timeout))
			for i, e := range timeout {
				recs[i] = redriveRecord(s.cfg.replyTopic, e, e.Redrives, []stream.Header{
					{Key: HeaderErrorCode, Value: []byte(s.cfg.errorCode)},
					{Key: stream.HeaderError, Value: []byte(reasons[e.ID])},
				})
			}
			err = s.pub.Publish(ctx, s.cfg.replyTopic, recs)
		}
		at := s.after(now)
		errs := recordErrors(err, len(timeout))
		for i, e := range timeout {
			switch {
			case errs[i] == nil:
				changes = append(changes, Change{ID: e.ID, Status: e.Status, Version: e.Version,
					To: TimedOut, StateTime: at, Redrives: e.Redrives, LastError: reasons[e.ID]})
			case ctx.Err() != nil:
			default:
				changes = append(changes, b.fail(s, e, at, fmt.Errorf("report to %s: %w", s.cfg.replyTopic, errs[i])))
			}
		}
	}
	return changes
}

// after is the time after a publish, for the changes it leads to: never
// before the sweep's time, so that every change is due after it.
func (s *Scheduler) after(sweep time.Time) time.Time {
	if at := s.now(); at.After(sweep) {
		return at
	}
	return sweep
}

// recordErrors returns, for a publish of n records that returned err, the
// error of each record: none when err is nil, what a [stream.PublishError]
// of n records says, else err for every one.
func recordErrors(err error, n int) []error {
	errs := make([]error, n)
	if err == nil {
		return errs
	}
	var pe *stream.PublishError
	if errors.As(err, &pe) && len(pe.Errs) == n {
		copy(errs, pe.Errs)
		return errs
	}
	for i := range errs {
		errs[i] = err
	}
	return errs
}

// timeoutReason says why e is to be timed out now, or "" when it is to be
// re-driven. Only a retrying entry times out: a parked one is re-driven at
// least once.
func (s *Scheduler) timeoutReason(e Entry, now time.Time) string {
	if e.Status != Retrying {
		return ""
	}
	if !now.Before(e.Created.Add(s.cfg.retryTimeout)) {
		return fmt.Sprintf("retry timeout %v passed since it was parked, after %d re-drives", s.cfg.retryTimeout, e.Redrives)
	}
	if s.cfg.maxRedrives > 0 && e.Redrives >= s.cfg.maxRedrives {
		return fmt.Sprintf("no answer after %d re-drives (the maximum)", e.Redrives)
	}
	return ""
}

// retrying is the change of an entry re-published at now: due again after
// its expiry, or at the retry timeout if that comes first. An entry
// re-driven after its retry timeout (parked for longer) gets its expiry:
// the consumer has that long to complete it before it times out.
func (s *Scheduler) retrying(e Entry, now time.Time) Change {
	due := now.Add(max(ceil(e.Expiry), Resolution))
	if t := e.Created.Add(s.cfg.retryTimeout); t.After(now) && t.Before(due) {
		due = t
	}
	return Change{ID: e.ID, Status: e.Status, Version: e.Version,
		To: Retrying, StateTime: now, DueAt: due, Redrives: e.Redrives + 1, LastError: e.LastError}
}

// fail is the change of an entry that could not be published: same status
// and state time, due again after one interval, with the error.
func (b *sweepBatch) fail(s *Scheduler, e Entry, now time.Time, err error) Change {
	b.errs[e.ID] = err
	return Change{ID: e.ID, Status: e.Status, Version: e.Version,
		To: e.Status, StateTime: e.StateTime, DueAt: now.Add(s.cfg.interval), Redrives: e.Redrives, LastError: err.Error()}
}

// report logs the applied changes and calls the hooks.
func (b *sweepBatch) report(s *Scheduler, applied []Change, ev *SweepEvent) {
	seen := make(map[int64]bool, len(applied))
	for _, c := range applied {
		seen[c.ID] = true
		e := b.byID[c.ID]
		e.Status, e.StateTime, e.DueAt, e.Redrives, e.LastError, e.Version = c.To, c.StateTime, c.DueAt, c.Redrives, c.LastError, c.Version+1
		switch err := b.errs[c.ID]; {
		case err != nil:
			ev.Failed++
			s.log.Warn("redrive: entry not published; tried again after the interval", "key", e.Key, "state", e.State(), "error", err)
			s.cfg.each(func(h Hooks) {
				if h.Failed != nil {
					h.Failed(EntryEvent{Entry: e, Err: err})
				}
			})
		case c.To == Retrying:
			ev.Redriven++
			s.cfg.each(func(h Hooks) {
				if h.Redriven != nil {
					h.Redriven(EntryEvent{Entry: e})
				}
			})
		case c.To == TimedOut:
			ev.TimedOut++
			s.log.Warn("redrive: entry timed out", "key", e.Key, "state", e.State(), "reason", e.LastError)
			s.cfg.each(func(h Hooks) {
				if h.TimedOut != nil {
					h.TimedOut(EntryEvent{Entry: e})
				}
			})
		}
	}
	for id, e := range b.byID {
		if !seen[id] && e.Status.Pending() {
			// Claimed but not changed: either the change lost its
			// compare-and-set (completed meanwhile) or the sweep was
			// interrupted before it.
			ev.Lost++
		}
	}
}

// redriveHeader reports whether a header is one that redriveRecord sets.
func redriveHeader(key string) bool {
	return strings.HasPrefix(key, "redeliver-redrive-") || key == HeaderErrorCode ||
		key == stream.HeaderTopic || key == stream.HeaderPartition || key == stream.HeaderOffset
}

// redriveRecord is the record published for e: its original key, value,
// headers and timestamp, with the re-drive headers replacing any it had,
// and extra appended.
func redriveRecord(topic string, e Entry, number int, extra []stream.Header) stream.Record {
	m := e.Message
	h := make([]stream.Header, 0, len(m.Headers)+6+len(extra))
	for _, x := range m.Headers {
		if redriveHeader(x.Key) {
			continue
		}
		h = append(h, x)
	}
	h = append(h,
		stream.Header{Key: HeaderKey, Value: []byte(e.Key)},
		stream.Header{Key: HeaderNumber, Value: strconv.AppendInt(nil, int64(number), 10)},
		stream.Header{Key: HeaderState, Value: []byte(e.State())},
		stream.Header{Key: stream.HeaderTopic, Value: []byte(m.Topic)},
		stream.Header{Key: stream.HeaderPartition, Value: strconv.AppendInt(nil, int64(m.Partition), 10)},
		stream.Header{Key: stream.HeaderOffset, Value: strconv.AppendInt(nil, m.Offset, 10)},
	)
	h = append(h, extra...)
	return stream.Record{Topic: topic, Key: m.Key, Value: m.Value, Headers: h, Timestamp: m.Timestamp}
}
