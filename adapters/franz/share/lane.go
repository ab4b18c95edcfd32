package share

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redeliver-go/redeliver/adapters/franz/internal/fetcherr"
	"github.com/redeliver-go/redeliver/adapters/franz/internal/kclient"
	"github.com/redeliver-go/redeliver/internal/leases"
	"github.com/redeliver-go/redeliver/stream"
)

// engineLease is a record lease as the engine's lease driver takes it; a
// lane's are *lease.
type engineLease = leases.Lease[stream.Record]

func kerrFor(code int16) error { return kerr.ErrorForCode(code) }

// lane is one member of the share group: a franz-go client and the loop
// that polls it. Its invariant: PollFetches is called only when every record
// of the previous poll has a final acknowledgement (accept, release, reject)
// or its lock is known lost, since franz-go accepts the others at the next
// poll.
//
// What a lane decides is only what is Kafka's: when to poll, when to renew
// a lock and send acknowledgements, whether a retry can be held (see
// lease.Hold). Every retry decision (delivery, count, hold or give up,
// hooks, exhaustion action, StopPartition) is the engine's: the lane hands
// each poll's records to its lane of the engine's lease driver
// (internal/leases) as leases.
type lane struct {
	c      *Consumer
	id     int
	name   string
	cl     *kgo.Client
	cancel context.CancelFunc // cl's context (kgo.WithContext)
	log    *slog.Logger
	units  leases.Lane[stream.Record]

	mu      sync.Mutex
	ackErrs map[tp]ackErr // the latest failed acknowledgement per partition
	// finals holds, per partition, the final acknowledgements made since
	// the broker last answered for it: logged when it refuses them.
	finals map[tp][]final

	// A poll's leases, kept for the next poll: a lane settles one poll's
	// records before it polls again.
	slab []lease
	ptrs []engineLease

	// flushFn, when set, flushes acknowledgements instead of the
	// client's FlushAcks (tests).
	flushFn func(context.Context) error
}

// flush sends the acknowledgements made and waits for the broker's
// answers (reported to acked first).
func (l *lane) flush(ctx context.Context) error {
	if l.flushFn != nil {
		return l.flushFn(ctx)
	}
	return l.cl.FlushAcks(ctx)
}

type tp struct {
	topic     string
	partition int32
}

type ackErr struct {
	at  time.Time
	err error
}

// final is a final acknowledgement made, until the broker answers for its
// partition.
type final struct {
	offset int64
	kind   EventKind // Accepted, Rejected or Released
}

// acked is the client's ShareAckCallback. A final acknowledgement the
// broker refuses is logged with the records it may have been for: a
// refused REJECT after a dead letter was written, say, delivers the record
// again, and it is dead-lettered twice.
func (l *lane) acked(_ *kgo.Client, rs kgo.ShareAckResults) {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range rs {
		k := tp{r.Topic, r.Partition}
		fs := l.finals[k]
		delete(l.finals, k)
		if r.Err == nil {
			continue
		}
		if l.ackErrs == nil {
			l.ackErrs = map[tp]ackErr{}
		}
		l.ackErrs[k] = ackErr{now, r.Err}
		if len(fs) == 0 {
			continue
		}
		offsets := make([]int64, 0, len(fs))
		rejected := 0
		for _, f := range fs {
			offsets = append(offsets, f.offset)
			if f.kind == Rejected {
				rejected++
			}
		}
		l.log.Warn("redeliver: the broker refused acknowledgements of the partition: the records they were for are delivered again (a record rejected after its exhaustion action, a dead letter written, is given up and its action done again)",
			"topic", r.Topic, "partition", r.Partition, "offsets", offsets, "rejected", rejected, "error", r.Err)
	}
}

// finalMade notes a final acknowledgement, until the broker answers.
func (l *lane) finalMade(r *kgo.Record, kind EventKind) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.finals == nil {
		l.finals = map[tp][]final{}
	}
	k := tp{r.Topic, r.Partition}
	l.finals[k] = append(l.finals[k], final{r.Offset, kind})
}

// ackErrSince returns the latest acknowledgement error of the partition
// reported at or after t.
func (l *lane) ackErrSince(k tp, t time.Time) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e, ok := l.ackErrs[k]; ok && !e.at.Before(t) {
		return e.err
	}
	return nil
}

func (l *lane) run(ctx context.Context) {
	defer l.close()
	var (
		gone    []*kgo.Record // records whose locks were lost
		backoff fetcherr.Backoff
	)
	for ctx.Err() == nil {
		if len(gone) > 0 {
			l.forget(ctx, gone)
			gone = gone[:0]
		}
		fs := l.cl.PollFetches(ctx)
		if ctx.Err() != nil {
			// A poll that raced the stop may still hold records: they
			// are acquired, and released they would count a delivery.
			// The engine drains them as the records of a poll in
			// flight at the stop.
			if p := l.poll(fs); len(p.leases) > 0 {
				l.acquired(p)
				l.units.Settle(ctx, p)
				clear(p.slab)
			}
			return
		}
		fatal, failed := l.c.fetchErrs.Seen(fs, time.Now())
		if fatal != nil {
			// The poll's records go back to the broker unhandled.
			fs.EachRecord(func(r *kgo.Record) { r.Ack(kgo.AckRelease) })
			l.log.Error("redeliver: share consumer stopped by a fetch error", "error", fatal)
			l.c.life.Fail(fatal)
			return
		}
		p := l.poll(fs)
		if len(p.leases) == 0 {
			fetcherr.Wait(ctx, backoff.Next(failed))
			continue
		}
		backoff.Next(false)
		l.acquired(p)
		l.units.Settle(ctx, p)
		for i := range p.slab {
			if ls := &p.slab[i]; !ls.final {
				gone = append(gone, ls.kr) // lost: its lock ran out
			}
		}
		clear(p.slab) // let go of the fetch buffers they point into
	}
}

// acquired reports a poll's records as acquired.
func (l *lane) acquired(p *poll) {
	for i := range p.slab {
		ls := &p.slab[i]
		l.event(Acquired, ls, func(e *Event) { e.DeliveryCount = int(ls.dc) })
	}
}

// flushWait is how long a lane's shutdown waits for its last
// acknowledgements (the releases of the records in flight) before it
// leaves the group: what is left goes with the leave, or the broker
// releases the records when their locks run out.
const flushWait = 250 * time.Millisecond

// close flushes what is left to acknowledge and leaves the group; the
// client releases every record that has no final acknowledgement. It
// takes at most flushWait and kclient.LeaveWait, whatever the broker is
// slow to answer.
func (l *lane) close() {
	ctx, cancel := context.WithTimeout(context.Background(), flushWait)
	defer cancel()
	if err := l.cl.FlushAcks(ctx); err != nil {
		l.log.Warn("redeliver: flushing acknowledgements at shutdown", "error", err)
	}
	l.closeClient()
}

// closeClient closes the lane's client within kclient.LeaveWait.
func (l *lane) closeClient() { kclient.Close(l.cl, l.cancel, l.log) }

// forget sends, alone, the release of records whose locks were lost. They
// are not ours any more, and the broker refuses the acknowledgement; but
// franz-go would accept them at the next poll, and a refused record fails
// every acknowledgement that travels in the same request for its
// partition. So the others go first.
func (l *lane) forget(ctx context.Context, lost []*kgo.Record) {
	fctx, cancel := context.WithTimeout(ctx, l.c.lock)
	defer cancel()
	_ = l.cl.FlushAcks(fctx)
	for _, r := range lost {
		r.Ack(kgo.AckRelease)
	}
	_ = l.cl.FlushAcks(fctx)
}

// poll turns a poll's records into leases, in the lane's memory of the
// previous poll (or new memory when it is too small).
func (l *lane) poll(fs kgo.Fetches) *poll {
	now := l.c.clock.Now()
	n := fs.NumRecords()
	p := &poll{l: l}
	if n == 0 {
		return p
	}
	if cap(l.slab) < n {
		l.slab, l.ptrs = make([]lease, n), make([]engineLease, 0, n)
	}
	p.slab, p.leases = l.slab[:n], l.ptrs[:0]
	clear(p.slab)
	i := 0
	fs.EachRecord(func(r *kgo.Record) {
		ls := &p.slab[i]
		i++
		toRecord(&ls.rec, r)
		ls.p, ls.kr, ls.dc, ls.deadline = p, r, r.DeliveryCount(), r.AcquisitionDeadline()
		// franz-go computes the deadline when it decodes the fetch, with
		// at least 1s: never trust it beyond the lock the group told.
		if lim := now.Add(l.c.lock); ls.deadline.IsZero() || lim.Before(ls.deadline) {
			ls.deadline = lim
		}
		p.leases = append(p.leases, ls)
	})
	return p
}

func toRecord(sr *stream.Record, r *kgo.Record) {
	*sr = stream.Record{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: r.Key, Value: r.Value, Timestamp: r.Timestamp}
	if len(r.Headers) > 0 {
		sr.Headers = make([]stream.Header, len(r.Headers))
		for i, h := range r.Headers {
			sr.Headers[i] = stream.Header{Key: h.Key, Value: h.Value}
		}
	}
}

// poll is one poll's records, as the engine's leases, and their upkeep.
type poll struct {
	l      *lane
	slab   []lease
	leases []engineLease
	// acked says that a final acknowledgement was made since the last
	// flush, first at ackedAt.
	acked   bool
	ackedAt time.Time
}

// lease is one acquired record.
type lease struct {
	p        *poll
	kr       *kgo.Record
	rec      stream.Record
	dc       int32     // the broker's delivery count
	deadline time.Time // when its lock runs out, as far as we know
	renewAt  time.Time // zero: renew when half the lock is left
	final    bool      // a final acknowledgement was made
}

func (ls *lease) Record() *stream.Record { return &ls.rec }
func (ls *lease) Deliveries() int        { return int(ls.dc) }
func (ls *lease) Deadline() time.Time    { return ls.deadline }

// Hold reports whether the record's lock can be kept until until: within
// the consumer's maximum hold, and, when the group does not renew locks,
// before its lock runs out (less a margin).
func (ls *lease) Hold(until time.Time) bool {
	c := ls.p.l.c
	now := c.clock.Now()
	margin := min(c.lock/10, 2*time.Second)
	return until.Sub(now) <= c.cfg.maxHold && (!c.noRenewal.Load() || until.Before(ls.deadline.Add(-margin)))
}

func (ls *lease) Accept()  { ls.ack(kgo.AckAccept, Accepted) }
func (ls *lease) Release() { ls.ack(kgo.AckRelease, Released) }
func (ls *lease) Reject()  { ls.ack(kgo.AckReject, Rejected) }

func (ls *lease) ack(how kgo.AckStatus, kind EventKind) {
	p := ls.p
	ls.kr.Ack(how)
	ls.final = true
	p.l.finalMade(ls.kr, kind)
	if !p.acked {
		p.acked, p.ackedAt = true, p.l.c.clock.Now()
	}
	p.l.event(kind, ls, nil)
}

func (p *poll) Leases() []engineLease { return p.leases }

// maxAckDelay is how long a final acknowledgement may wait for others
// while handler calls of the same poll run.
const maxAckDelay = 100 * time.Millisecond

// Tend renews the locks of the open records that have half their lock
// or less left, and sends the final acknowledgements made: records stay
// open, so the lane does not poll soon, and franz-go's 1s timer may be
// longer than what is left of their locks. Not at once while handler
// calls run, though: their results come soon, and a flush is a round trip
// to the broker. Both are flushed here, on the one goroutine that
// acknowledges this poll's records, so that no final acknowledgement of a
// record travels while its renewal does.
func (p *poll) Tend(ctx context.Context, now time.Time, open []engineLease, busy bool) (wake time.Time) {
	c := p.l.c
	earliest := func(t time.Time) {
		if !t.IsZero() && (wake.IsZero() || t.Before(wake)) {
			wake = t
		}
	}
	p.renew(ctx, now, open)
	if len(open) == 0 {
		return time.Time{} // the acknowledgements go with the next poll's fetch
	}
	if p.acked {
		flushAt := p.ackedAt.Add(min(maxAckDelay, c.lock/10))
		if !busy || !now.Before(flushAt) {
			p.acked = false
			fctx, cancel := context.WithTimeout(ctx, c.lock/2)
			t0 := time.Now()
			ferr := p.l.cl.FlushAcks(fctx)
			cancel()
			p.l.log.Debug("redeliver: acknowledgements flushed", "took", time.Since(t0), "error", ferr)
		} else {
			earliest(flushAt)
		}
	}
	if !c.noRenewal.Load() {
		for _, l := range open {
			ls := l.(*lease)
			if ls.renewAt.IsZero() {
				earliest(ls.deadline.Add(-c.lock / 2))
			} else {
				earliest(ls.renewAt)
			}
		}
	}
	return wake
}

// renew extends the locks of the open records that have half their lock
// or less left.
func (p *poll) renew(ctx context.Context, now time.Time, open []engineLease) {
	c := p.l.c
	if c.noRenewal.Load() {
		return
	}
	var due []*lease
	for _, l := range open {
		ls := l.(*lease)
		at := ls.renewAt
		if at.IsZero() {
			at = ls.deadline.Add(-c.lock / 2)
		}
		if !now.Before(at) {
			due = append(due, ls)
		}
	}
	if len(due) == 0 {
		return
	}
	t0 := time.Now()
	for _, ls := range due {
		ls.kr.Ack(kgo.AckRenew)
	}
	fctx, cancel := context.WithTimeout(ctx, c.lock/4)
	err := p.l.flush(fctx)
	cancel()
	after := c.clock.Now()
	for _, ls := range due {
		perr := p.l.ackErrSince(tp{ls.rec.Topic, ls.rec.Partition}, t0)
		switch {
		case err == nil && perr == nil:
			ls.deadline, ls.renewAt = now.Add(c.lock), time.Time{}
			p.l.log.Debug("redeliver: lock renewed", "topic", ls.rec.Topic, "partition", ls.rec.Partition, "offset", ls.rec.Offset, "until", ls.deadline, "took", after.Sub(now))
		case lockGone(perr):
			// The record is not ours any more, whatever our deadline
			// says: the engine sees the lease lost at once, cancels what
			// runs for it and acknowledges nothing, and the record is
			// left to the member the broker hands it to.
			ls.deadline, ls.renewAt = after, time.Time{}
			p.l.log.Warn("redeliver: lock renewal refused: the broker no longer holds the record for this consumer (its share session ended, or the partition's leader changed and the new leader does not know the acquisition); nothing more is done with it here, and the broker delivers it again",
				"topic", ls.rec.Topic, "partition", ls.rec.Partition, "offset", ls.rec.Offset, "error", perr)
		default:
			if perr == nil {
				perr = err
			}
			if errors.Is(perr, kerr.UnsupportedVersion) || errors.Is(perr, kerr.InvalidRequest) {
				if c.noRenewal.CompareAndSwap(false, true) {
					p.l.log.Warn("redeliver: the broker does not renew acquisition locks: a retry is held only while the record's lock lasts, a later one releases the record to the broker", "error", perr)
				}
			}
			ls.renewAt = after.Add(c.lock / 10)
			p.l.log.Debug("redeliver: lock renewal failed", "topic", ls.rec.Topic, "partition", ls.rec.Partition, "offset", ls.rec.Offset, "error", perr)
		}
	}
}

// lockGone reports whether a refused renewal says that the record's
// acquisition is gone, not only that the renewal did not get through.
// franz-go drops, with INVALID_SHARE_SESSION_EPOCH, the acknowledgements
// of records acquired in a share session that has ended since (the broker
// lost their state), and with INVALID_RECORD_STATE those of records
// acquired from a leader the partition has since left (a new leader does
// not know the acquisition); the broker answers INVALID_RECORD_STATE to
// a record this member does not hold, and SHARE_SESSION_NOT_FOUND when
// it knows no session of this member. Any other error (a timeout, a
// broker away) leaves the lock as it was: it is tried again until the
// lock runs out.
func lockGone(err error) bool {
	return errors.Is(err, kerr.InvalidShareSessionEpoch) || errors.Is(err, kerr.InvalidRecordState) || errors.Is(err, kerr.ShareSessionNotFound)
}

// observe turns what the engine did with a lease into the lane's events.
func observe(sl engineLease, e leases.Event) {
	ls := sl.(*lease)
	l := ls.p.l
	switch e.Kind {
	case leases.Handled:
		l.event(Handled, ls, func(ev *Event) { ev.OK, ev.Start = e.OK, e.Start })
	case leases.Held:
		l.event(Held, ls, func(ev *Event) { ev.At = e.At })
	case leases.ActionDone:
		l.event(ActionDone, ls, nil)
	}
}
