// Package streamtest provides in-memory partitions that implement
// [stream.Claim], a controllable [Clock], a delivery [Recorder] and fault
// injection, for testing handlers and the engine without a broker.
//
// A typical test appends records to partitions, runs a [stream.Processor]
// over them with [Run], waits until the checkpoints reach the end with
// [Partition.WaitCommitted], and inspects what the [Recorder] saw and what
// [Partition.Commits] wrote:
//
//	part := streamtest.NewPartition("orders", 0, 4) // batches of up to 4 records
//	part.Append(time.Now(), "a", "b", "c")
//	go func() { _ = part.WaitCommitted(ctx, part.End()); cancel() }()
//	err := streamtest.Run(ctx, proc, part) // until ctx is cancelled
//	next, _ := part.Committed()             // 3
//
// Run it under testing/synctest, or give the Processor a [Clock], so that
// backoffs take no real time.
package streamtest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redeliver-go/redeliver/internal/park"
	"github.com/redeliver-go/redeliver/stream"
)

// Commit is one checkpoint written to a [Partition].
type Commit struct {
	Next     int64 // the offset of the next record to consume
	Metadata string
	Err      error // the injected error the commit returned, if any
}

// Partition is an in-memory partition with a committed offset. It implements
// [stream.Claim] for one owner at a time (see [Run] and [Partition.Revoke]).
// It is safe for concurrent use. The zero Partition is an empty partition
// with no topic, number 0, batches of one record and offset 0 committed;
// [NewPartition] names it.
type Partition struct {
	topic     string
	partition int32

	mu        sync.Mutex
	log       []stream.Record
	skipped   map[int64]bool // offsets Fetch never returns (AppendSkipped)
	pos       int64          // next offset Fetch reads
	returned  int64          // the offset after the last record Fetch returned
	committed int64          // -1 when nothing was committed
	metadata  string
	commits   []Commit
	maxBatch  int
	paused    bool
	pauses    int
	owned     bool
	cancel    context.CancelCauseFunc
	faults    []error
	latency   time.Duration // how long a commit takes to be written
	changed   chan struct{}
	parking   bool   // SetParking
	parks     int    // how many times a worker parked
	own       *owner // the current owner (Run), nil before the first
}

// owner is one worker's claim of a Partition, from Run: its context, and
// its worker's resume while the worker is parked.
type owner struct {
	ctx    context.Context
	resume park.Resume // under Partition.mu; nil unless parked
	// done gets the worker's error when a resumed worker ends (not when
	// it parks again).
	done chan error
}

// NewPartition returns an empty partition whose batches have at most
// maxBatch records (at least 1).
func NewPartition(topic string, partition int32, maxBatch int) *Partition {
	return &Partition{topic: topic, partition: partition, committed: -1, maxBatch: max(maxBatch, 1), changed: make(chan struct{})}
}

// SetMaxBatch sets how many records a batch holds at most (at least 1),
// from the next Fetch on: a next owner that fetches fewer records, or
// more, than the previous one (another batch setting after a redeploy,
// another client, a short fetch).
func (p *Partition) SetMaxBatch(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.maxBatch = max(n, 1)
}

// notify wakes whoever waits for a change, and a parked worker once
// records are there or its claim ended; p.mu is held.
func (p *Partition) notify() {
	if p.changed != nil {
		close(p.changed)
	}
	p.changed = make(chan struct{})
	if o := p.own; o != nil && o.resume != nil && (p.readyLocked() || !p.owned || o.ctx.Err() != nil) {
		p.wakeLocked(o)
	}
}

// readyLocked reports whether Fetch would return at once, without waiting:
// the log has entries past its position (records, or skipped entries that
// move its position), or the partition is paused (Fetch fails); p.mu is
// held.
func (p *Partition) readyLocked() bool {
	return int64(len(p.log)) > p.pos || p.paused
}

// SetParking makes the partition park its worker while it has nothing to
// fetch (on), or not (off, the default), from the worker's next wait on:
// the worker's goroutine ends, under the same claim, and a goroutine of
// the partition's runs it again once records are appended or its claim
// ends (a revocation, or the end of Run's context), as an adapter does to
// keep neither a goroutine nor a worker for an idle partition. [Run] waits
// for a parked worker's end as for any other; a worker of a Processor's
// Process called directly has no claim, and does not park.
func (p *Partition) SetParking(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.parking = on
}

// Parked reports whether the partition's worker is parked now, and how
// many times a worker of it parked in all (see [Partition.SetParking]).
func (p *Partition) Parked() (now bool, times int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.own != nil && p.own.resume != nil, p.parks
}

// parker is the claim Run gives the engine: the Partition, which parks its
// worker when asked (park.Claim, an internal seam kept out of the
// Partition's own methods).
type parker struct{ *part }

// part names the Partition that a parker embeds, so that its methods
// (Partition among them) are the parker's.
type part = Partition

// Park takes the worker's resume when parking is on, the worker's claim
// has not ended and Fetch would wait (nothing appended past its position,
// not paused): the check and the taking are one step under p.mu, as are
// the appends and the revocation that run resume (notify), so that
// neither records nor the claim's end are missed.
func (c parker) Park(resume park.Resume) bool {
	p := c.part
	p.mu.Lock()
	defer p.mu.Unlock()
	o := p.own
	if !p.parking || o == nil || resume == nil || o.resume != nil || !p.owned || o.ctx.Err() != nil || p.readyLocked() {
		return false
	}
	o.resume = resume
	p.parks++
	return true
}

// wakeLocked runs o's parked worker on a goroutine of its own, once: its
// end, unless it parks again, goes to o.done; p.mu is held.
func (p *Partition) wakeLocked(o *owner) {
	fn := o.resume
	if fn == nil {
		return
	}
	o.resume = nil
	go func() {
		if err := fn(); err != park.ErrParked {
			o.done <- err
		}
	}()
}

// waiter returns the channel notify closes next; p.mu is held. A zero
// Partition makes it on first use.
func (p *Partition) waiter() chan struct{} {
	if p.changed == nil {
		p.changed = make(chan struct{})
	}
	return p.changed
}

// Append adds records with the given values, timestamped at ts, and returns
// the offset of the first one.
func (p *Partition) Append(ts time.Time, values ...string) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	first := int64(len(p.log))
	for _, v := range values {
		off := int64(len(p.log))
		p.log = append(p.log, stream.Record{Topic: p.topic, Partition: p.partition, Offset: off, Value: []byte(v), Timestamp: ts})
	}
	p.notify()
	return first
}

// AppendKeyed adds one record per key given, keyed with it (no key for
// ""), its value its offset in decimal, timestamped at ts, and returns the
// offset after the last one.
func (p *Partition) AppendKeyed(ts time.Time, keys ...string) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, k := range keys {
		off := int64(len(p.log))
		r := stream.Record{Topic: p.topic, Partition: p.partition, Offset: off, Value: []byte(strconv.FormatInt(off, 10)), Timestamp: ts}
		if k != "" {
			r.Key = []byte(k)
		}
		p.log = append(p.log, r)
	}
	p.notify()
	return int64(len(p.log))
}

// AppendN adds n records whose values are their offsets in decimal,
// timestamped at ts, and returns the offset after the last one.
func (p *Partition) AppendN(ts time.Time, n int) int64 {
	vals := make([]string, n)
	p.mu.Lock()
	base := len(p.log)
	p.mu.Unlock()
	for i := range vals {
		vals[i] = strconv.Itoa(base + i)
	}
	return p.Append(ts, vals...) + int64(n)
}

// AppendSkipped adds n entries to the log that Fetch never returns, as a
// Kafka client skips a transaction's marker, and under read_committed an
// aborted transaction's records, and returns the offset of the first. The
// Partition is a [stream.Positioner]: its Position is past the entries it
// skipped after the last record it returned, and a Fetch that reads
// skipped entries only returns no records.
func (p *Partition) AppendSkipped(n int) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	first := int64(len(p.log))
	if p.skipped == nil {
		p.skipped = map[int64]bool{}
	}
	for range n {
		off := int64(len(p.log))
		p.skipped[off] = true
		p.log = append(p.log, stream.Record{Topic: p.topic, Partition: p.partition, Offset: off})
	}
	p.notify()
	return first
}

// Position returns the offset after the entries Fetch skipped since the
// last record it returned (see [Partition.AppendSkipped]), or -1 when it
// skipped none.
func (p *Partition) Position() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pos > p.returned {
		return p.pos
	}
	return -1
}

// End returns the offset after the last record.
func (p *Partition) End() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return int64(len(p.log))
}

// FailCommits makes the next len(errs) commits fail, one error each, before
// anything is written.
func (p *Partition) FailCommits(errs ...error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.faults = append(p.faults, errs...)
}

// SetCommitLatency makes every commit from now on take d to be written, as
// a broker's round trip does: Commit waits d (or until its context is done)
// before it is written, and ownership is checked after the wait.
func (p *Partition) SetCommitLatency(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.latency = d
}

// Committed returns the committed offset (-1 for none) and its metadata:
// the partition's checkpoint, as the [stream.Claim] that p is reports it.
func (p *Partition) Committed() (int64, string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.committed, p.metadata
}

// SetCheckpoint sets the committed offset and metadata, as another consumer
// or tool might have left them.
func (p *Partition) SetCheckpoint(next int64, metadata string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.committed, p.metadata = next, metadata
	p.notify()
}

// Commits returns every commit so far, failed ones included, in order.
func (p *Partition) Commits() []Commit {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Commit(nil), p.commits...)
}

// Paused reports whether the partition is paused now, and how many times it
// was paused in all.
func (p *Partition) Paused() (now bool, times int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.paused, p.pauses
}

// WaitCommitted blocks until the committed offset is at least next, or ctx is
// done.
func (p *Partition) WaitCommitted(ctx context.Context, next int64) error {
	for {
		p.mu.Lock()
		c, ch := p.committed, p.waiter()
		p.mu.Unlock()
		if c >= next {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("streamtest: %s/%d committed %d, waiting for %d: %w", p.topic, p.partition, c, next, context.Cause(ctx))
		}
	}
}

// Revoke takes the partition away from its current owner, as a rebalance
// does: the owner's context is cancelled with [stream.ErrRevoked] and its
// later commits fail with it. Run the partition again to give it a new owner,
// which starts from the committed offset.
func (p *Partition) Revoke() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.owned = false
	if p.cancel != nil {
		p.cancel(stream.ErrRevoked)
	}
	p.notify()
}

// claim makes the partition owned by a new worker whose context ctx is
// cancelled by Revoke; the end of ctx runs the worker if it is parked.
func (p *Partition) claim(ctx context.Context) (*owner, context.CancelCauseFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	o := &owner{ctx: ctx, done: make(chan error, 1)}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.owned = true
	p.cancel = cancel
	p.own = o
	p.paused = false
	p.pos = max(p.committed, 0)
	p.returned = p.pos
	context.AfterFunc(ctx, func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.wakeLocked(o)
	})
	return o, cancel
}

// notOwned is the error of a Fetch or Commit when no worker owns p:
// [stream.ErrRevoked] after Revoke, and, when it never had one (a
// Processor's Process called on it directly), an error wrapping it that says
// how to give p an owner.
func (p *Partition) notOwned() error {
	if p.cancel == nil {
		return fmt.Errorf("streamtest: %s/%d: no worker owns the partition (process it with streamtest.Run, which gives it one, "+
			"rather than calling Processor.Process on it directly): %w", p.topic, p.partition, stream.ErrRevoked)
	}
	return stream.ErrRevoked
}

// Topic returns the partition's topic.
func (p *Partition) Topic() string { return p.topic }

// Partition returns the partition's number.
func (p *Partition) Partition() int32 { return p.partition }

// Fetch returns the next batch of at most maxBatch records, waiting for
// records to be appended. It reads at most maxBatch entries of the log:
// when they are all skipped ones ([Partition.AppendSkipped]) it returns no
// records, its Position past them. It fails with [stream.ErrRevoked] once
// revoked.
func (p *Partition) Fetch(ctx context.Context) ([]stream.Record, error) {
	for {
		p.mu.Lock()
		if !p.owned {
			err := p.notOwned()
			p.mu.Unlock()
			return nil, err
		}
		if p.paused {
			p.mu.Unlock()
			return nil, fmt.Errorf("streamtest: %s/%d: fetch while paused", p.topic, p.partition)
		}
		if n := int64(len(p.log)) - p.pos; n > 0 {
			end := p.pos + min(n, int64(max(p.maxBatch, 1)))
			recs := p.log[p.pos:end:end]
			if len(p.skipped) > 0 {
				recs = nil
				for _, r := range p.log[p.pos:end] {
					if !p.skipped[r.Offset] {
						recs = append(recs, r)
					}
				}
			}
			p.pos = end
			if len(recs) > 0 {
				p.returned = recs[len(recs)-1].Offset + 1
			}
			p.mu.Unlock()
			return recs, nil
		}
		ch := p.waiter()
		p.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}
}

// Pause marks the partition paused.
func (p *Partition) Pause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.paused = true
	p.pauses++
}

// Resume marks the partition not paused.
func (p *Partition) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.paused = false
}

// Commit records the checkpoint, or fails with the next injected fault, or
// with [stream.ErrRevoked] when the partition is not owned. It refuses, with
// an error, a checkpoint beyond the records fetched so far: no engine may
// commit what it has not seen.
func (p *Partition) Commit(ctx context.Context, next int64, metadata string) error {
	p.mu.Lock()
	d := p.latency
	p.mu.Unlock()
	if d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return context.Cause(ctx)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.owned {
		return p.notOwned()
	}
	if len(p.faults) > 0 {
		err := p.faults[0]
		p.faults = p.faults[1:]
		p.commits = append(p.commits, Commit{Next: next, Metadata: metadata, Err: err})
		return err
	}
	if next > p.pos {
		return fmt.Errorf("streamtest: %s/%d: commit of offset %d beyond the fetched offset %d", p.topic, p.partition, next, p.pos)
	}
	p.commits = append(p.commits, Commit{Next: next, Metadata: metadata})
	p.committed, p.metadata = next, metadata
	p.notify()
	return nil
}

// Run processes the partitions with proc, one goroutine each, until ctx is
// done, and returns once every worker has stopped (a parked one too: see
// [Partition.SetParking]). A partition that is
// revoked stops its worker only; Run it again to reassign it. Run returns
// the first worker error that is not a cancellation or revocation.
func Run(ctx context.Context, proc *stream.Processor, parts ...*Partition) error {
	if proc == nil {
		return errors.New("streamtest: Run: nil processor")
	}
	for i, p := range parts {
		if p == nil {
			return fmt.Errorf("streamtest: Run: partition %d is nil", i+1)
		}
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for _, part := range parts {
		o, cancel := part.claim(ctx)
		wg.Go(func() {
			defer cancel(nil)
			err := proc.Process(o.ctx, parker{part})
			if err == park.ErrParked {
				err = <-o.done // the worker goes on, resumed by part
			}
			if ctx.Err() != nil || isEnd(err) {
				return
			}
			mu.Lock()
			if first == nil {
				first = err
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	return first
}

func isEnd(err error) bool {
	return errors.Is(err, stream.ErrRevoked) || errors.Is(err, context.Canceled)
}
