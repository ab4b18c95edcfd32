package kafkaadapter

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/redeliver-go/redeliver/internal/retrystate"
)

// The commit window by default (each adapter's WithCommitWindow): none,
// every commit is written before the next batch is delivered; and the
// window the adapters' docs recommend for throughput, with which the
// success commits not written yet cover at most 500ms or 50,000 records.
const (
	DefaultCommitInterval = 0
	DefaultCommitRecords  = 0

	RecommendedCommitInterval = 500 * time.Millisecond
	RecommendedCommitRecords  = 50000
)

// CheckCommitWindow returns an error naming pkg's WithCommitWindow when
// the window is out of range: both more than 0, or both 0 (every commit
// synchronous).
func CheckCommitWindow(pkg string, interval time.Duration, records int64) error {
	if interval < 0 || records < 0 || (interval == 0) != (records == 0) {
		return fmt.Errorf("%s: WithCommitWindow(%v, %d): want both more than 0, or both 0 (every commit synchronous)", pkg, interval, records)
	}
	return nil
}

// Coalescer is one partition's commits (DESIGN 9.2), the one scheme of the
// franz-go, kafka-go, sarama and confluent adapters' claims. A commit that
// carries a retry state, and the first success after a give-up or a halt,
// are written before Commit returns. Any other success commit is noted
// and written in the background, one request in flight per partition: the
// first success after a retry state (it clears the state) at once, any
// other once Records records or Interval have passed since the last
// commit sent, or at once when the partition is caught up (CaughtUp), and
// at the latest by Final, which the claim calls before the partition is
// given up. While a commit is in flight (or failed), the records after it
// are held to the window too: once they reach it, the next commit is
// written before Commit returns, so that a crash delivers again at most
// the commit in flight and one window.
//
// A success commit Commit took is reported written (the Processor reports
// its checkpoint): one that fails, in the background or because a commit
// that superseded it failed, is kept, and written by the next commit, the
// next flush or Final.
//
// Set the fields, then call Start before the first Commit; it is safe for
// concurrent use from then on.
type Coalescer struct {
	// Interval and Records are the commit window; Interval 0 writes every
	// commit before Commit returns.
	Interval time.Duration
	Records  int64
	// Claim writes the partition's commits and answers for it. An
	// interface, not three functions, so that a claim that is a pointer
	// makes no closures (three allocations per partition).
	Claim Sender
	// Quiet, when set, reports the errors of a background flush that are
	// tried again without a warning (the claim's Revoked always is).
	Quiet func(error) bool
	// Log, Topic and Partition name the partition in the log.
	Log       *slog.Logger
	Topic     string
	Partition int32

	// The fields below are laid out so that no padding is left between
	// them: a claim of the franz-go adapter that holds a Coalescer fits
	// the runtime's 480-byte size class, one per partition.
	pendEp int32 // the pending commit's leader epoch (see pendNext)
	// smu is held across a commit's send, so that the partition's commits
	// go out in order, one at a time; pmu guards the rest and is taken
	// after smu.
	smu         sync.Mutex
	pmu         sync.Mutex
	inited      bool
	closed      bool   // Final has run: nothing more is coalesced
	pending     bool   // a success commit not sent yet
	statesKnown bool   // askedStates is known (see askedStates)
	flushing    bool   // a background flush runs
	urgent      bool   // the pending commit clears a retry state: flushed at once
	failed      bool   // the last flush failed: the next waits for the timer
	pendNext    int64  // the pending commit's offset
	pendMD      string // and metadata (a key-ordered window's finished records)
	pendRecs    int64  // records it passes since the last commit sent
	askedAt     int64  // the offset of the latest commit asked for
	askedMD     string // and its metadata
	// The retry states askedMD holds, when known (statesKnown): every one
	// of them is in a commit written (see coalescible). Not known after a
	// commit that carried a state of its own failed.
	askedStates []retrystate.State
	sentAt      time.Time   // when the last commit was sent
	timer       *time.Timer // flushes the pending commit at the interval
	flushes     sync.WaitGroup
}

// Sender is the claim a [Coalescer] writes the commits of.
type Sender interface {
	// SendCommit writes one commit (at next, with the leader epoch of
	// the record before next or -1, and metadata) and returns the
	// broker's answer; kind says which commit it is. One runs at a time.
	SendCommit(next int64, epoch int32, metadata string, kind SendKind) error
	// CaughtUp reports whether the partition has nothing more buffered.
	CaughtUp() bool
	// Ended reports whether the claim is ending: nothing more is taken,
	// nor flushed in the background (Final writes what is pending).
	Ended() bool
	// Revoked returns what Commit returns once the claim has ended.
	Revoked() error
	// Background runs fn, a background flush, on a goroutine of the
	// claim's choosing (go fn(), or one shared with other partitions'
	// work: a flush waits for the broker's answer, and a goroutine per
	// partition would leave a goroutine's descriptor per partition
	// behind, which the runtime keeps).
	Background(fn func())
}

// SendKind says which commit Sender.SendCommit is asked to write.
type SendKind uint8

const (
	// SendSync is a commit Commit writes before it returns.
	SendSync SendKind = iota
	// SendFlush is a coalesced success commit written in the background.
	SendFlush
	// SendFinal is the claim's last commit, written by Final; it is sent
	// although the claim is ending.
	SendFinal
)

// Start sets the commit the partition had when it was claimed: its offset
// (-1 for none) and metadata. It is called before the first Commit.
func (c *Coalescer) Start(committed int64, metadata string) {
	c.pmu.Lock()
	c.askedAt, c.askedMD, c.inited = committed, metadata, true
	c.askedStates, c.statesKnown = nil, false
	if states, err := retrystate.CommitStates(metadata, committed); err == nil {
		c.askedStates, c.statesKnown = states, true
	}
	c.pmu.Unlock()
}

// Commit takes the commit of next, with the leader epoch of the record
// before it (or -1) and metadata: it coalesces a success, and writes one
// that clears a retry state in the background at once; it writes a retry
// state (after the commit in flight, if any) and returns the broker's
// answer.
//
// A success is a commit that records nothing a crash must not lose: every
// retry state its metadata holds is one the commit before it held, the
// same (see coalescible). In partition ordering that is a commit with no
// metadata; in key ordering also a window that adds finished records and
// keeps its retrying records' states as they were. Lost in a crash, such
// a commit only makes the next owner deliver the records it moved past
// again.
//
// A success that clears a retry state (one that counts retries, not a
// give-up nor a halt) is not waited for: the retry it follows was counted
// before it was delivered (DESIGN 9.2), so a crash before the success is
// written makes the next owner count that retry as made, as a crash
// during the retry does, and never resets the count. It is sent at once,
// so that the time during which a crash does so is the commit's own, as
// when Commit waited for it. A success after a give-up or a halt (the
// exhaustion action's, a Skip's) is still written before Commit returns:
// its caller is told whether it was written.
func (c *Coalescer) Commit(next int64, epoch int32, metadata string) error {
	// Its retry states, read when a window may coalesce it (known).
	var states []retrystate.State
	known := false
	if c.Interval > 0 {
		var err error
		states, err = retrystate.CommitStates(metadata, next)
		known = err == nil
	}
	if known {
		c.pmu.Lock()
		ok, clears := c.coalescible(states)
		if c.inited && ok && !c.overdue(next) {
			defer c.pmu.Unlock()
			if c.closed || c.Claim.Ended() {
				return c.Claim.Revoked()
			}
			if next > c.askedAt && c.askedAt >= 0 {
				c.pendRecs += next - c.askedAt
			}
			if clears {
				c.urgent = true
			}
			c.askedAt, c.askedMD, c.askedStates = next, metadata, states
			c.pending, c.pendNext, c.pendEp, c.pendMD = true, next, epoch, metadata
			c.schedule()
			return nil
		}
		c.pmu.Unlock()
	}
	c.smu.Lock()
	defer c.smu.Unlock()
	// This commit supersedes a coalesced one not sent yet: the engine
	// commits in order, never behind what it committed before.
	c.pmu.Lock()
	superseded, supNext, supEp, supMD, supUrgent := c.pending, c.pendNext, c.pendEp, c.pendMD, c.urgent
	c.pending, c.failed, c.urgent = false, false, false
	c.askedAt, c.askedMD, c.pendRecs, c.inited = next, metadata, 0, true
	// Until it is written, its states are not known to be.
	c.askedStates, c.statesKnown = nil, false
	c.sentAt = time.Now()
	c.pmu.Unlock()
	err := c.Claim.SendCommit(next, epoch, metadata, SendSync)
	if err == nil && known {
		c.pmu.Lock()
		if c.askedAt == next && c.askedMD == metadata {
			c.askedStates, c.statesKnown = states, true
		}
		c.pmu.Unlock()
	}
	if err != nil && superseded {
		// The coalesced commit was reported written when it was taken:
		// when this one is not written (failed, or refused as the claim
		// ends), it is put back, before the send lock is released, for
		// the next commit or Final to write. Dropped, the partition's
		// next owner read the checkpoint before it.
		c.pmu.Lock()
		if !c.pending {
			c.pending, c.pendNext, c.pendEp, c.pendMD, c.urgent = true, supNext, supEp, supMD, supUrgent
		}
		c.pmu.Unlock()
	}
	return err
}

// coalescible reports whether a commit whose metadata holds states may be
// taken and written in the background, and whether it clears a retry
// state (it is then sent at once); c.pmu is held. It may when every state
// it holds is one the commit asked for before it held, the same, and in a
// commit written (statesKnown: a commit with a state of its own is
// written before Commit returns), and when none of the states that
// commit held and this one does not was a give-up or a halt: the success
// after those is written before Commit returns. A state that goes counted
// retries: the commit clears it.
func (c *Coalescer) coalescible(states []retrystate.State) (ok, clears bool) {
	if !c.statesKnown {
		return len(states) == 0 && c.askedMD == "", false
	}
	for i := range states {
		if !holds(c.askedStates, &states[i]) {
			return false, false
		}
	}
	for i := range c.askedStates {
		a := &c.askedStates[i]
		if holds(states, a) {
			continue
		}
		if a.GivenUp != 0 || a.Halted {
			return false, false
		}
		clears = true
	}
	return true, clears
}

// holds reports whether states holds s, the same.
func holds(states []retrystate.State, s *retrystate.State) bool {
	for i := range states {
		if states[i].Offset == s.Offset {
			return sameState(&states[i], s)
		}
	}
	return false
}

// sameState reports whether a and b are the same retry state.
func sameState(a, b *retrystate.State) bool {
	return a.Offset == b.Offset && a.Retries == b.Retries && a.FirstFailure.Equal(b.FirstFailure) &&
		a.LastDelay == b.LastDelay && a.NextAt.Equal(b.NextAt) && a.OutageTime == b.OutageTime &&
		a.Request == b.Request && a.LastError == b.LastError && a.Records == b.Records &&
		a.Started == b.Started && a.GivenUp == b.GivenUp && a.Alone == b.Alone && a.Halted == b.Halted
}

// overdue reports whether a success commit of next would stretch the
// redelivery window past the commit window while the commit before it is
// in flight, or failed; c.pmu is held.
func (c *Coalescer) overdue(next int64) bool {
	if !c.flushing && !c.failed {
		return false
	}
	recs := c.pendRecs
	if next > c.askedAt && c.askedAt >= 0 {
		recs += next - c.askedAt
	}
	return recs >= c.Records || time.Since(c.sentAt) >= c.Interval
}

// schedule starts a background flush of the pending commit when it is due,
// or arms the timer that starts it at the interval; c.pmu is held.
func (c *Coalescer) schedule() {
	if c.flushing || !c.pending || c.closed || c.Claim.Ended() {
		return
	}
	wait := c.Interval - time.Since(c.sentAt)
	if wait <= 0 || !c.failed && (c.urgent || c.pendRecs >= c.Records || c.Claim.CaughtUp()) {
		if c.timer != nil {
			c.timer.Stop()
		}
		// The flush counts as sent from now: a commit taken before its
		// goroutine runs is within the window (overdue), not past it
		// because the last send was long ago, never, or due's.
		c.flushing, c.sentAt = true, time.Now()
		c.flushes.Add(1)
		c.Claim.Background(c.flush)
		return
	}
	if c.timer == nil {
		c.timer = time.AfterFunc(wait, c.due)
		return
	}
	c.timer.Reset(wait)
}

// due runs at the interval: it starts the pending commit's flush.
func (c *Coalescer) due() {
	c.pmu.Lock()
	defer c.pmu.Unlock()
	c.sentAt = time.Time{} // due now
	c.schedule()
}

// flush writes the pending commit in the background; one runs at a time,
// and when it is done it starts the next if one is due. A commit that
// fails (or is refused because the claim is ending) is put back, for the
// next flush or for Final.
func (c *Coalescer) flush() {
	defer c.flushes.Done()
	c.smu.Lock()
	c.pmu.Lock()
	if !c.pending || c.closed {
		c.flushing = false
		c.pmu.Unlock()
		c.smu.Unlock()
		return
	}
	next, epoch, md, urgent := c.pendNext, c.pendEp, c.pendMD, c.urgent
	c.pending, c.pendRecs, c.sentAt, c.urgent = false, 0, time.Now(), false
	c.pmu.Unlock()
	err := c.Claim.SendCommit(next, epoch, md, SendFlush)
	c.pmu.Lock()
	defer c.pmu.Unlock()
	if err != nil {
		if !errors.Is(err, c.Claim.Revoked()) && (c.Quiet == nil || !c.Quiet(err)) {
			c.Log.Warn("redeliver: a success commit failed, will try again at the commit interval or with the next one",
				"topic", c.Topic, "partition", c.Partition, "next", next, "error", err)
		}
		if !c.pending {
			c.pending, c.pendNext, c.pendEp, c.pendMD, c.urgent = true, next, epoch, md, urgent
		}
		c.sentAt = time.Now() // tried again at the interval, not at once
	}
	c.smu.Unlock()
	c.flushing = false
	c.failed = err != nil
	c.schedule()
}

// Final writes the coalesced commit not written yet, if any, before the
// partition is given up; a commit being sent (Commit's or a flush's) is
// waited for first, and a flush that had not begun to send finds the
// Coalescer closed and returns. Nothing is coalesced afterwards, and no
// flush runs once Final has returned. The claim calls it once it is
// ending (Ended reports true, so that a commit still asked for is
// refused) and before it gives the partition up.
func (c *Coalescer) Final() {
	c.pmu.Lock()
	c.closed = true
	if c.timer != nil {
		c.timer.Stop()
	}
	c.pmu.Unlock()
	defer c.flushes.Wait()
	// A send in flight puts back what failed before it releases smu.
	c.smu.Lock()
	defer c.smu.Unlock()
	c.pmu.Lock()
	next, epoch, md, pending := c.pendNext, c.pendEp, c.pendMD, c.pending
	c.pending = false
	c.pmu.Unlock()
	if !pending {
		return
	}
	if err := c.Claim.SendCommit(next, epoch, md, SendFinal); err != nil {
		c.Log.Warn("redeliver: the last success commit was not written before the partition was given up; its next owner delivers the records after the last checkpoint written again",
			"topic", c.Topic, "partition", c.Partition, "next", next, "error", err)
	}
}
