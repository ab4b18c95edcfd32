package host

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/hostconfig"
	"github.com/redeliver-go/redeliver/internal/retrystate"
	"github.com/redeliver-go/redeliver/redrive"
	"github.com/redeliver-go/redeliver/stream"
)

// Status is what the host shows on its status page and in /status.json.
type Status struct {
	// Ready is what /readyz answers; Reason says why not.
	Ready  bool   `json:"ready"`
	Reason string `json:"reason"`
	// Time is when the status was taken.
	Time      time.Time        `json:"time"`
	Functions []FunctionStatus `json:"functions"`
}

// FunctionStatus is one function's part of a [Status].
type FunctionStatus struct {
	Name string `json:"name"`
	// Trigger describes what starts the function and TriggerFrom where
	// that was set ("code" or host.json's position).
	Adapter     string `json:"adapter"`
	Topic       string `json:"topic"`
	Group       string `json:"group"`
	Share       bool   `json:"share,omitempty"`  // Group is a share group
	Source      string `json:"source,omitempty"` // a host.Source's description
	MaxBatch    int    `json:"maxBatch,omitempty"`
	TriggerFrom string `json:"triggerFrom"`
	// Policy describes the retry policy in force, PolicyFrom where it was
	// read.
	Policy     string `json:"policy"`
	PolicyFrom string `json:"policyFrom"`
	// Assigned reports whether its consumer is ready, as /readyz counts
	// it: for a Kafka trigger, joined its group and received an
	// assignment; for a [Source], as its Ready says (running, without
	// one).
	Assigned bool `json:"assigned"`
	// Outage is the downstream outage in force, when the function's
	// outage budget (host.json's outageBudget) ran out; nil when none
	// is. Its failing partitions are in StateOutage meanwhile.
	Outage     *OutageStatus     `json:"outage,omitempty"`
	Partitions []PartitionStatus `json:"partitions"`
	// Parked lists the entries of the re-drive store for records of the
	// function's topic (see [WithRedrive]); nil when the host has no store.
	Parked *ParkedStatus `json:"parked,omitempty"`
}

// OutageStatus is an outage of a function's downstream: its outage budget
// ran out, so failures spend no retries, and its failing partitions wait
// while one probe at a time tests the downstream (see [stream.Budget]).
type OutageStatus struct {
	// Since is when the outage began.
	Since time.Time `json:"since"`
	// Probes counts the probes started in it.
	Probes int `json:"probes"`
}

// ParkedStatus is a function's part of the re-drive store: the entries
// that are not done, of records from the function's topic. Functions that
// read the same topic show the same entries.
type ParkedStatus struct {
	// Parked, Retrying and TimedOut count the entries in each status, up
	// to [MaxParkedCount] each; More says a count stopped there.
	Parked   int  `json:"parked"`
	Retrying int  `json:"retrying"`
	TimedOut int  `json:"timedOut"`
	More     bool `json:"more,omitempty"`
	// Records is the number of records those entries stand for (see
	// [redrive.Entry.Origin]): one entry per record, so fewer records than
	// entries means a record was parked more than once, by a consumer that
	// drops the re-drive's headers. Reparks sums the entries' re-parks:
	// re-drives whose record failed again and was handed back.
	Records int `json:"records"`
	Reparks int `json:"reparks"`
	// Entries are the first [MaxParkedShown] of them, oldest first.
	Entries []ParkedEntry `json:"entries"`
	// Error says why the store could not be read, if it could not.
	Error string `json:"error,omitempty"`
}

// ParkedEntry is one entry of a [ParkedStatus].
type ParkedEntry struct {
	ID  int64  `json:"id"`
	Key string `json:"key"`
	// State is the entry's state name (REDELIVER_PARKED, ..._RETRY,
	// ..._TIMEOUT, or the application's own); Status its status (parked,
	// retrying, timed_out).
	State  string `json:"state"`
	Status string `json:"status"`
	// The record's position.
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
	// Redrives counts its re-drives so far, Reparks those whose record
	// failed again.
	Redrives  int    `json:"redrives"`
	Reparks   int    `json:"reparks"`
	LastError string `json:"lastError,omitempty"`
	// Parked is when it was parked; NextAt when the scheduler next re-drives
	// (or times out) it, zero for a timed-out entry.
	Parked time.Time `json:"parked"`
	NextAt time.Time `json:"nextAt,omitzero"`
}

// The bounds of a [ParkedStatus], which the status page reads on every
// refresh.
const (
	MaxParkedCount = 1000
	MaxParkedShown = 20
)

// storeTimeout bounds the reading of the re-drive store for a status.
const storeTimeout = 2 * time.Second

// parked reads the entries of topic from the store.
func parked(ctx context.Context, store redrive.Store, topic string) *ParkedStatus {
	ctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	ps := &ParkedStatus{Entries: []ParkedEntry{}}
	var all []redrive.Entry
	for _, st := range []redrive.Status{redrive.Parked, redrive.Retrying, redrive.TimedOut} {
		es, err := store.List(ctx, redrive.Filter{Status: st, Topic: topic, Limit: MaxParkedCount + 1})
		if err != nil {
			ps.Error = err.Error()
			return ps
		}
		if len(es) > MaxParkedCount {
			es, ps.More = es[:MaxParkedCount], true
		}
		switch st {
		case redrive.Parked:
			ps.Parked = len(es)
		case redrive.Retrying:
			ps.Retrying = len(es)
		default:
			ps.TimedOut = len(es)
		}
		all = append(all, es...)
	}
	records := map[string]bool{}
	for _, e := range all {
		t, p, o := e.Origin()
		records[redrive.RecordKey(t, p, o)] = true
		ps.Reparks += e.Reparks
	}
	ps.Records = len(records)
	slices.SortFunc(all, func(a, b redrive.Entry) int { return cmp.Compare(a.ID, b.ID) })
	for _, e := range all[:min(len(all), MaxParkedShown)] {
		ps.Entries = append(ps.Entries, ParkedEntry{ID: e.ID, Key: e.Key, State: e.State(), Status: e.Status.String(),
			Topic: e.Message.Topic, Partition: e.Message.Partition, Offset: e.Message.Offset, Redrives: e.Redrives, Reparks: e.Reparks,
			LastError: e.LastError, Parked: e.Created.Local(), NextAt: e.DueAt.Local()})
	}
	return ps
}

// Total is the number of entries counted: 0 for a nil ParkedStatus (a
// function without a re-drive store).
func (p *ParkedStatus) Total() int {
	if p == nil {
		return 0
	}
	return p.Parked + p.Retrying + p.TimedOut
}

// The states of a partition.
const (
	// StateFlowing: batches are delivered as they come.
	StateFlowing = "flowing"
	// StateBackoff: a batch failed and waits out its backoff before the
	// next retry; its checkpoint is withheld.
	StateBackoff = "backoff"
	// StateExhausted: a batch was given up and its exhaustion action runs
	// (a dead-letter produce being tried again, for one).
	StateExhausted = "exhausted"
	// StateStopped: the exhaustion action stopped the partition; it waits
	// for Resume or Skip.
	StateStopped = "stopped"
	// StateOutage: the function's downstream is in an outage (its outage
	// budget ran out) and the partition's batch failed, or its retry fell
	// due, meanwhile: it waits, its checkpoint withheld and no retry
	// spent, until a success ends the outage or its batch is the probe.
	StateOutage = "outage"
)

// PartitionStatus is one claimed partition's part of a [FunctionStatus].
type PartitionStatus struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	// State is one of StateFlowing, StateBackoff, StateOutage,
	// StateExhausted, StateStopped.
	State string `json:"state"`
	// Checkpoint is the committed offset: the next record to consume; -1
	// when nothing was committed.
	Checkpoint int64 `json:"checkpoint"`
	// Metadata is the committed metadata: the retry state of a withheld
	// batch. CommittedState is that state as the engine's decoder reads
	// it; nil when nothing is committed or the metadata is empty.
	Metadata       string          `json:"metadata,omitempty"`
	CommittedState *CommittedState `json:"committedState,omitempty"`
	// Deliveries counts handler calls on this partition since it was
	// claimed; Failures those that failed.
	Deliveries int64 `json:"deliveries"`
	Failures   int64 `json:"failures"`
	// FirstOffset and LastOffset are the offsets of the partition's
	// latest batch: the one delivered last, or held (in backoff, in an
	// outage, given up, stopped). In a share group and in key ordering,
	// where the unit held is a record and the partition's other records
	// go on, they are the held record's until it is through (and, with
	// several stopped, the first of StoppedRecords). In JSON they are
	// left out only while the partition has had no batch; 0 is an offset
	// like any other.
	FirstOffset int64 `json:"firstOffset"`
	LastOffset  int64 `json:"lastOffset"`
	// Retry is the number of the coming retry (backoff) or of retries made
	// (stopped); MaxRetries the limit in force, -1 for none: the policy's,
	// or a handler's RetryResult's while it holds. MaxRetries is always
	// present in JSON, 0 included, whatever the partition's history.
	Retry      int `json:"retry,omitempty"`
	MaxRetries int `json:"maxRetries"`
	// NextAt is when the coming retry is due.
	NextAt       time.Time `json:"nextAt,omitzero"`
	FirstFailure time.Time `json:"firstFailure,omitzero"`
	LastError    string    `json:"lastError,omitempty"`
	// Note says what happened last that the state does not: "resumed by
	// an operator", "continuing a previous owner's retries".
	Note string `json:"note,omitempty"`
	// Since is when the partition entered its state.
	Since time.Time `json:"since"`
	// StoppedRecords are the offsets of the partition's records held by
	// StopPartition in share mode or in key ordering (the unit stopped is
	// a record there):
	// each is resumed or skipped on its own ([Host.ResumeRecord],
	// [Host.SkipRecord], the actions with an offset).
	StoppedRecords []int64 `json:"stoppedRecords,omitempty"`
	// StoppedKeys are, in key ordering, the keys of StoppedRecords, in
	// the same order: StopPartition stopped the key, not the partition
	// (the key's later records wait; the partition's other keys go on).
	// Absent in partition ordering and in a share group.
	StoppedKeys []string `json:"stoppedKeys,omitempty"`
}

// CommittedState is the retry state committed with a partition's
// checkpoint, as the engine reads it (see [retrystate.DecodeState]): what a
// next owner of the partition, after a rebalance or a restart, continues.
type CommittedState struct {
	// Offset is the offset of the record the state belongs to; -1 when the
	// state names none (written before states did). Applies reports
	// whether that is the record at the checkpoint: the engine applies a
	// state to that record only and ignores it otherwise.
	Offset  int64 `json:"offset"`
	Applies bool  `json:"applies"`
	// Retries is the number of the retry due or started (Started: its
	// outcome is not committed, and a next owner counts it as made), or,
	// for a record given up, the retries it was given up after.
	Retries      int       `json:"retries"`
	Started      bool      `json:"started,omitempty"`
	NextAt       time.Time `json:"nextAt,omitzero"`
	FirstFailure time.Time `json:"firstFailure,omitzero"`
	// OutageTime is the time the record waited out outages of the
	// downstream since its first failure, which maxRetryTime does not
	// count ("1m0s").
	OutageTime string `json:"outageTime,omitempty"`
	// GivenUp is why the record was given up ("retries spent", ...) while
	// its exhaustion action has not succeeded: a next owner gives it up
	// again at once. With Halted, the action stopped the partition at the
	// record until an operator resumes or skips it; a next owner delivers
	// it again with a fresh count. LastError is the record's last error as
	// the state keeps it (its first 128 bytes).
	GivenUp   string `json:"givenUp,omitempty"`
	Halted    bool   `json:"halted,omitempty"`
	LastError string `json:"lastError,omitempty"`
	// Records is how many records from Offset the state covers: with
	// GivenUp, how many were given up (1 for a record given up alone, the
	// batch's size otherwise); for a retry of a batch that failed as a
	// whole, the batch's size. A next owner retries or gives up these and
	// delivers the ones after them. 0 when the state does not say
	// (written before states did). Alone reports a retry of a record that
	// failed alone (FailedAt, PerRecord): given up, it is given up alone.
	// The command line's "redeliver offsets" shows the same fields.
	Records int  `json:"records,omitempty"`
	Alone   bool `json:"alone,omitempty"`
	// Summary says all of it in words; Error why the metadata is not a
	// state the engine reads (another tool's, or damaged), which it
	// ignores.
	Summary string `json:"summary"`
	Error   string `json:"error,omitempty"`
	// Window, for a commit of key (or no) ordering, whose metadata is a
	// window ("rd2:", docs/KEYS.md), is that window as a next owner reads
	// it; the fields above are then its lowest record's.
	Window *CommittedWindow `json:"window,omitempty"`
}

// CommittedWindow is the window committed with a partition's checkpoint
// in key (or no) ordering ([retrystate.RestoreWindow]): the records from
// the checkpoint to Next, of which Unfinished are not finished yet (a next
// owner delivers those again, and skips the others).
type CommittedWindow struct {
	Next       int64 `json:"next"`
	Unfinished int   `json:"unfinished"`
	// Records are the unfinished records that hold a state, by offset:
	// retrying (the retry due or started), given up with their exhaustion
	// action not done, or stopped (Halted: StopPartition stopped the
	// record's key, whose later records wait until an operator resumes
	// or skips the record; the actions with its offset).
	Records []CommittedState `json:"records,omitempty"`
}

// committedState decodes the metadata committed at checkpoint, with
// maxRetries the policy's limit; nil when there is none.
func committedState(at int64, md string, maxRetries int) *CommittedState {
	if at < 0 || md == "" {
		return nil
	}
	if strings.HasPrefix(md, "rd2:") {
		return committedWindow(at, md, maxRetries)
	}
	st, err := retrystate.DecodeState(md)
	if err != nil {
		return &CommittedState{Offset: -1, Summary: retrystate.Describe(md, maxRetries) + ": ignored", Error: err.Error()}
	}
	return recordState(at, st, maxRetries)
}

// committedWindow decodes the window of key (or no) ordering committed at
// checkpoint at.
func committedWindow(at int64, md string, maxRetries int) *CommittedState {
	w, err := retrystate.RestoreWindow(at, md, checkpoint.WindowLimits{MaxBytes: 1 << 20})
	if err != nil {
		return &CommittedState{Offset: -1, Summary: "a window a next owner cannot read: ignored, the records after the checkpoint are delivered again", Error: err.Error()}
	}
	cw := &CommittedWindow{Next: w.Next(), Unfinished: w.Unfinished()}
	seen := 0
	for o := w.Base(); o < w.Next() && seen < cw.Unfinished; o++ {
		if w.Finished(o) {
			continue
		}
		seen++
		if st, ok := w.State(o); ok {
			cw.Records = append(cw.Records, *recordState(o, st, maxRetries))
		}
	}
	c := &CommittedState{Offset: -1, Window: cw}
	if len(cw.Records) > 0 {
		c = &cw.Records[0]
		cp := *c
		c = &cp
		c.Window = cw
	}
	c.Summary = fmt.Sprintf("window: %d of the records from %d to %d not finished", cw.Unfinished, at, cw.Next-1)
	if cw.Next <= at {
		c.Summary = "window: every record finished"
	}
	stopped, retrying, given := 0, 0, 0
	for _, r := range cw.Records {
		switch {
		case r.Halted:
			stopped++
		case r.GivenUp != "":
			given++
		default:
			retrying++
		}
	}
	for _, x := range []struct {
		n    int
		what string
	}{{retrying, "retrying"}, {given, "given up, the action not done"}, {stopped, "stopped (its key waits for an operator)"}} {
		if x.n > 0 {
			c.Summary += fmt.Sprintf("; %d %s", x.n, x.what)
		}
	}
	for i, r := range cw.Records {
		if i == 3 {
			c.Summary += fmt.Sprintf("; and %d more", len(cw.Records)-3)
			break
		}
		c.Summary += "; " + r.Summary
	}
	return c
}

// recordState is the CommittedState of st, committed at checkpoint at.
func recordState(at int64, st retrystate.State, maxRetries int) *CommittedState {
	md := retrystate.EncodeState(st)
	if st.Retries == 0 && st.GivenUp == 0 {
		return &CommittedState{Offset: -1, Summary: "no retry"}
	}
	c := &CommittedState{Offset: st.Offset, Applies: st.AppliesTo(at), Retries: st.Retries,
		Records: st.Records, Alone: st.Alone,
		Started: st.Started && st.GivenUp == 0, NextAt: st.NextAt, FirstFailure: st.FirstFailure, Halted: st.Halted, LastError: st.LastError}
	if st.OutageTime > 0 {
		c.OutageTime = st.OutageTime.String()
	}
	if st.GivenUp != 0 {
		c.GivenUp = st.GivenUp.String()
	}
	switch {
	case !c.Applies:
		c.Summary = fmt.Sprintf("retry state of the record at offset %d, not of the one at the checkpoint (%d): ignored, the record at %d starts its count over", st.Offset, at, at)
		return c
	case st.Offset >= 0:
		c.Summary = fmt.Sprintf("record at offset %d: %s", st.Offset, retrystate.Describe(md, maxRetries))
	default:
		c.Summary = retrystate.Describe(md, maxRetries)
	}
	if c.OutageTime != "" {
		c.Summary += "; " + c.OutageTime + " waited out in outages of the downstream"
	}
	return c
}

// MarshalJSON writes p with firstOffset and lastOffset, unless the
// partition has had no batch yet.
func (p PartitionStatus) MarshalJSON() ([]byte, error) {
	type plain PartitionStatus // without the method
	v := struct {
		plain
		FirstOffset *int64 `json:"firstOffset,omitempty"`
		LastOffset  *int64 `json:"lastOffset,omitempty"`
	}{plain: plain(p)}
	if p.Deliveries > 0 || p.State != StateFlowing {
		v.FirstOffset, v.LastOffset = &p.FirstOffset, &p.LastOffset
	}
	return json.Marshal(v)
}

// fnStatus follows one function's partitions through its processor's
// hooks. It is safe for concurrent use.
type fnStatus struct {
	f    *function
	now  func() time.Time
	proc *stream.Processor

	mu     sync.Mutex
	parts  map[partKey]*PartitionStatus
	outage *OutageStatus // the outage in force, nil for none
	// stoppedAt is when a partition's first unit now held by
	// StopPartition stopped: the Since of a row shown stopped at a
	// record (see stoppedAtRecord).
	stoppedAt map[partKey]time.Time
}

type partKey struct {
	topic     string
	partition int32
}

func newFnStatus(f *function, now func() time.Time) *fnStatus {
	return &fnStatus{f: f, now: now, parts: map[partKey]*PartitionStatus{}, stoppedAt: map[partKey]time.Time{}}
}

// update runs fn on the partition's status, creating it when create is
// true.
func (s *fnStatus) update(topic string, partition int32, create bool, fn func(p *PartitionStatus)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := partKey{topic, partition}
	p := s.parts[k]
	if p == nil {
		if !create {
			return
		}
		p = &PartitionStatus{Topic: topic, Partition: partition, State: StateFlowing, Checkpoint: -1, Since: s.now(), MaxRetries: s.maxRetries()}
		s.parts[k] = p
	}
	fn(p)
}

// set moves p to state.
func (s *fnStatus) set(p *PartitionStatus, state string) {
	if p.State != state {
		p.State, p.Since = state, s.now()
	}
}

// flowing moves p to StateFlowing and forgets its retries.
func (s *fnStatus) flowing(p *PartitionStatus) {
	s.set(p, StateFlowing)
	p.Retry, p.MaxRetries = 0, s.maxRetries() // a RetryResult's limit ends with its batch
	p.NextAt, p.FirstFailure, p.LastError = time.Time{}, time.Time{}, ""
}

func (s *fnStatus) maxRetries() int {
	if s.proc == nil {
		return 0
	}
	return s.proc.Policy().MaxRetries
}

// hooks returns the hooks that keep the status.
func (s *fnStatus) hooks() stream.Hooks {
	return stream.Hooks{
		Claimed: func(e stream.ClaimEvent) {
			s.mu.Lock()
			delete(s.parts, partKey{e.Topic, e.Partition}) // a new claim starts afresh
			delete(s.stoppedAt, partKey{e.Topic, e.Partition})
			s.mu.Unlock()
			s.update(e.Topic, e.Partition, true, func(p *PartitionStatus) {
				p.Checkpoint, p.Metadata = e.Committed, e.Metadata
				s.claimed(p, e)
			})
		},
		Released: func(e stream.ReleaseEvent) {
			s.mu.Lock()
			delete(s.parts, partKey{e.Topic, e.Partition})
			delete(s.stoppedAt, partKey{e.Topic, e.Partition})
			s.mu.Unlock()
		},
		Delivered: func(e stream.DeliveredEvent) {
			s.update(e.Topic, e.Partition, true, func(p *PartitionStatus) {
				p.Deliveries++
				if e.Outcome == stream.Failed {
					p.Failures++
					p.LastError = errText(e.Err)
					if p.FirstFailure.IsZero() {
						p.FirstFailure = e.Attempt.FirstFailure
						if p.FirstFailure.IsZero() {
							p.FirstFailure = s.now()
						}
					}
				}
				p.MaxRetries = e.Attempt.MaxRetries
				var rr *stream.RetryResult
				if errors.As(e.Err, &rr) {
					p.MaxRetries = rr.MaxRetries
				}
				shown := p.FirstOffset == e.FirstOffset && p.LastOffset == e.LastOffset
				switch {
				case e.Uncounted:
					s.set(p, StateOutage)
					p.FirstOffset, p.LastOffset, p.NextAt = e.FirstOffset, e.LastOffset, time.Time{}
					p.Note = "failed during an outage of the downstream: no retry spent; waits for the outage to end or to be its probe"
				case p.State == StateFlowing:
					p.FirstOffset, p.LastOffset = e.FirstOffset, e.LastOffset
				case shown && e.Outcome == stream.Succeeded:
					// The batch the row holds went through. In partition
					// ordering its checkpoint follows; in a share group,
					// where nothing is checkpointed, this is the only word
					// that the record is done.
					s.flowing(p)
				case shown:
				default:
					// Another unit of the partition (a share group's record,
					// a key's record in key ordering): it goes on beside the
					// one held, which the row keeps showing.
				}
			})
		},
		OutageBegan: func(e stream.OutageEvent) {
			s.mu.Lock()
			s.outage = &OutageStatus{Since: e.Since}
			s.mu.Unlock()
		},
		Probing: func(e stream.ProbeEvent) {
			s.update(e.Topic, e.Partition, true, func(p *PartitionStatus) {
				if s.outage != nil {
					s.outage.Probes = max(s.outage.Probes, e.Probe)
				}
				s.set(p, StateOutage)
				p.FirstOffset, p.LastOffset = e.FirstOffset, e.LastOffset
				p.Note = fmt.Sprintf("its batch is the outage's probe %d: delivered again to test the downstream", e.Probe)
			})
		},
		OutageEnded: func(e stream.OutageEvent) {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.outage = nil
			for _, p := range s.parts {
				if p.State == StateOutage {
					s.flowing(p) // delivered again now
					p.Note = "the outage ended: its batch is delivered again"
				}
			}
		},
		RetryScheduled: func(e stream.RetryEvent) {
			s.update(e.Topic, e.Partition, true, func(p *PartitionStatus) {
				s.set(p, StateBackoff)
				p.FirstOffset, p.LastOffset = e.FirstOffset, e.LastOffset
				p.Retry, p.NextAt = e.Retry, e.At
				if e.Err == nil {
					p.LastError = "retry requested by the handler"
				} else {
					p.LastError = errText(e.Err)
				}
				p.Note = ""
			})
		},
		Exhausted: func(e stream.ExhaustedEvent) {
			s.update(e.Topic, e.Partition, true, func(p *PartitionStatus) {
				s.set(p, StateExhausted)
				p.FirstOffset, p.LastOffset, p.NextAt = e.FirstOffset, e.LastOffset, time.Time{}
				if e.Err != nil {
					p.Retry, p.FirstFailure = e.Err.Retries, e.Err.FirstFailure
					p.LastError = fmt.Sprintf("given up (%v): %s", e.Err.Reason, errText(e.Err.Last))
				}
			})
		},
		Stopped: func(e stream.StoppedEvent) {
			s.update(e.Topic, e.Partition, true, func(p *PartitionStatus) {
				s.set(p, StateStopped)
				if k := (partKey{e.Topic, e.Partition}); s.stoppedAt[k].IsZero() {
					s.stoppedAt[k] = p.Since
				}
				p.FirstOffset, p.LastOffset, p.NextAt = e.FirstOffset, e.LastOffset, time.Time{}
				if e.Err != nil {
					p.Retry, p.FirstFailure = e.Err.Retries, e.Err.FirstFailure
					p.LastError = fmt.Sprintf("given up (%v): %s", e.Err.Reason, errText(e.Err.Last))
				}
				p.Note = ""
			})
		},
		ActionTried: func(e stream.ActionEvent) {
			if e.Err != nil {
				return
			}
			s.update(e.Topic, e.Partition, false, func(p *PartitionStatus) {
				// The given-up batch the row holds is dealt with (dead-
				// lettered, parked, skipped). In partition ordering its
				// checkpoint follows; in a share group the record is
				// rejected, and this is the only word of it.
				if p.State == StateExhausted && p.FirstOffset == e.FirstOffset && p.LastOffset == e.LastOffset {
					s.flowing(p)
				}
			})
		},
		Checkpointed: func(e stream.CheckpointEvent) {
			s.update(e.Topic, e.Partition, true, func(p *PartitionStatus) {
				p.Checkpoint, p.Metadata = e.Next, e.Metadata
				if e.Metadata == "" && p.State != StateFlowing {
					s.flowing(p)
				}
			})
		},
	}
}

// stoppedAtRecord shows ps stopped at sp, the first record of its
// partition held by StopPartition in share mode or key ordering. There the
// unit stopped is a record and the partition's other records go on: their
// deliveries, retries and checkpoints update the row after the stop, and
// must not hide it.
func stoppedAtRecord(ps *PartitionStatus, sp stream.StoppedPartition, since time.Time) {
	if ps.State != StateStopped {
		ps.State = StateStopped
		if !since.IsZero() {
			ps.Since = since
		}
	}
	ps.FirstOffset, ps.LastOffset, ps.NextAt = sp.FirstOffset, sp.LastOffset, time.Time{}
	if sp.Err != nil {
		ps.Retry, ps.FirstFailure = sp.Err.Retries, sp.Err.FirstFailure
		ps.LastError = fmt.Sprintf("given up (%v): %s", sp.Err.Reason, errText(sp.Err.Last))
	}
}

// claimed shows what the engine does with the retry state a previous owner
// committed for the partition it claims (see stream.Processor.Process).
func (s *fnStatus) claimed(p *PartitionStatus, e stream.ClaimEvent) {
	st, err := retrystate.ReadCommitted(e.Committed, e.Metadata)
	var other *retrystate.OtherRecordError
	switch {
	case e.Committed < 0:
		return // nothing committed: a first delivery
	case errors.As(err, &other):
		p.Note = fmt.Sprintf("the committed retry state belongs to the record at offset %d, not to the one at the checkpoint: ignored, the record at %d starts its count over",
			other.Offset, e.Committed)
		return
	case err != nil || st.Retries == 0 && st.GivenUp == 0:
		return // no state: a first delivery
	case st.Halted:
		// Delivered again with a fresh count, as a Resume would.
		p.LastError = st.LastError
		p.Note = fmt.Sprintf("its previous owner stopped it at offset %d, given up after %d %s (%s): delivered again with a fresh count",
			e.Committed, st.Retries+1, plural(st.Retries+1, "delivery", "deliveries"), st.GivenUp)
		return
	}
	p.FirstOffset, p.LastOffset, p.Retry, p.FirstFailure = e.Committed, e.Committed, st.Retries, st.FirstFailure
	p.MaxRetries = s.maxRetries()
	if st.Request != (retrystate.Request{}) {
		p.MaxRetries = st.Request.MaxRetries // the handler's RetryResult replaces the policy
	}
	if st.GivenUp != 0 {
		// Given up again at once: its exhaustion action runs.
		s.set(p, StateExhausted)
		p.LastError = fmt.Sprintf("given up (%v): %s", st.GivenUp, st.LastError)
		p.Note = "given up by its previous owner, whose exhaustion action had not succeeded: the action runs again"
		return
	}
	s.set(p, StateBackoff)
	p.NextAt = st.NextAt
	p.Note = "continuing a previous owner's retries"
	switch {
	case st.Started:
		// Counted as made: the engine schedules the next retry (the
		// RetryScheduled hook), or gives the record up.
		p.NextAt = time.Time{}
		p.Note += fmt.Sprintf(": retry %d had started, and counts as made", st.Retries)
	case s.proc != nil:
		// The engine's own decision: it brings a due time beyond the
		// policy's delay for the retry back to it.
		m := retrystate.NewMachine(s.proc.Policy())
		if d := m.Resume(st, s.now(), nil); d.Action == retrystate.RetryLater || d.Action == retrystate.RetryNow {
			p.NextAt = d.At
		}
	}
}

// released records an operator's Resume or Skip of a stopped partition.
// A skip leaves the partition given up until its checkpoint moves past
// last, the offset of the stopped batch's last record, unless it has
// already.
func (s *fnStatus) released(topic string, partition int32, how string, last int64) {
	s.update(topic, partition, false, func(p *PartitionStatus) {
		if how == "resumed" || p.Checkpoint > last {
			s.flowing(p)
		} else {
			s.set(p, StateExhausted) // until the checkpoint moves past the batch
		}
		p.Note = how + " by an operator at " + s.now().Format(time.TimeOnly)
	})
}

// recordReleased records an operator's resume or skip of a record held
// stopped in share mode: the partition flows again when it was the last
// one (a record carries no checkpoint to wait for).
func (s *fnStatus) recordReleased(topic string, partition int32, what string, last bool) {
	s.update(topic, partition, false, func(p *PartitionStatus) {
		if last {
			s.flowing(p)
		}
		p.Note = what + " at " + s.now().Format(time.TimeOnly)
	})
}

// snapshot returns the function's status.
func (s *fnStatus) snapshot() FunctionStatus {
	f := s.f
	fs := FunctionStatus{
		Name: f.name, Adapter: f.trigger.Adapter, Topic: f.trigger.Topic, Group: f.trigger.Group, Share: f.trigger.Share, Source: f.sourceDescription(),
		MaxBatch: f.trigger.MaxBatch, TriggerFrom: f.origin, Assigned: f.ready(),
		Policy: describePolicy(f.policy), PolicyFrom: "no policy: the default",
	}
	if f.policy != nil {
		fs.PolicyFrom = f.policy.Origin
	}
	stopped := map[partKey]bool{}
	records := map[partKey][]stream.StoppedPartition{}
	keyed := s.proc != nil && s.proc.Ordering() == stream.ByKey
	if s.proc != nil {
		for _, sp := range s.proc.Stopped() {
			k := partKey{sp.Topic, sp.Partition}
			stopped[k] = true
			if sp.Record {
				records[k] = append(records[k], sp)
			}
		}
	}
	now := s.now()
	s.mu.Lock()
	if s.outage != nil {
		o := *s.outage
		fs.Outage = &o
	}
	maxRetries := s.maxRetries()
	for k, p := range s.parts {
		ps := *p
		ps.CommittedState = committedState(ps.Checkpoint, ps.Metadata, maxRetries)
		if recs := records[k]; len(recs) > 0 { // Stopped sorts them by offset
			for _, sp := range recs {
				ps.StoppedRecords = append(ps.StoppedRecords, sp.FirstOffset)
				if keyed {
					ps.StoppedKeys = append(ps.StoppedKeys, sp.Key)
				}
			}
			stoppedAtRecord(&ps, recs[0], s.stoppedAt[k])
		} else if !stopped[k] {
			delete(s.stoppedAt, k) // resumed or skipped: a next stop starts its own time
		}
		switch {
		case ps.State == StateStopped && !stopped[k] && s.proc != nil:
			// The processor says which partitions are stopped; a stopped
			// partition it no longer holds was resumed or skipped.
			ps.State = StateFlowing
		case ps.State == StateBackoff && fs.Outage != nil && !ps.NextAt.After(now):
			// A retry that falls due during an outage waits for it to
			// end (or to be its probe) before it is delivered.
			ps.State, ps.Since = StateOutage, ps.NextAt
			if fs.Outage.Since.After(ps.Since) {
				ps.Since = fs.Outage.Since
			}
			ps.Note = "its retry fell due during an outage of the downstream: it waits for the outage to end or to be its probe"
		}
		fs.Partitions = append(fs.Partitions, ps)
	}
	s.mu.Unlock()
	slices.SortFunc(fs.Partitions, func(a, b PartitionStatus) int {
		return cmp.Or(cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
	})
	return fs
}

// Status returns the host's status: every function with its claimed
// partitions, and its entries of the re-drive store when the host has one
// (read with a timeout of 2 seconds).
func (h *Host) Status() Status { return h.status(context.Background()) }

func (h *Host) status(ctx context.Context) Status {
	ready, reason := h.Ready()
	if h.usable() != nil {
		return Status{Reason: reason, Time: time.Now(), Functions: []FunctionStatus{}}
	}
	st := Status{Ready: ready, Reason: reason, Time: h.c.now(), Functions: []FunctionStatus{}}
	h.mu.Lock()
	fns := slices.Clone(h.fns)
	statuses := make([]*fnStatus, len(fns))
	for i, f := range fns {
		statuses[i] = f.status
	}
	h.mu.Unlock()
	for i, f := range fns {
		if statuses[i] == nil {
			st.Functions = append(st.Functions, FunctionStatus{Name: f.name, Policy: describePolicy(h.cfg.Function(f.name))})
			continue
		}
		fs := statuses[i].snapshot()
		if h.c.store != nil && fs.Topic != "" { // a Source may name no topic
			fs.Parked = parked(ctx, h.c.store, fs.Topic)
		}
		st.Functions = append(st.Functions, fs)
	}
	return st
}

// plural returns one when n is 1, else many.
func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// describePolicy says in a line what a policy does.
func describePolicy(p *hostconfig.RetryPolicy) string {
	if p == nil || p.RetryCount == 0 {
		then := "skip"
		if p != nil {
			then = p.OnExhausted.Action.String()
		}
		return "no retries, then " + then
	}
	s := fmt.Sprintf("%d %s", p.RetryCount, plural(p.RetryCount, "retry", "retries"))
	if p.RetryCount == checkpoint.Infinite {
		s = "retries forever"
	}
	switch st := p.Strategy; st.Name {
	case "fixed", "fixedDelay":
		s += fmt.Sprintf(", %v apart", st.Delay)
	case "":
	default:
		s += ", " + st.Name
		if st.InitialDelay > 0 {
			s += fmt.Sprintf(" from %v", st.InitialDelay)
		} else if st.MinDelay > 0 {
			s += fmt.Sprintf(" from %v", st.MinDelay)
		}
	}
	if p.MaxRetryTime > 0 {
		s += fmt.Sprintf(", within %v", p.MaxRetryTime)
	}
	then := p.OnExhausted.Action.String()
	if p.OnExhausted.Action == hostconfig.ActionDeadLetter {
		then += " to " + p.OnExhausted.Topic
	}
	return s + ", then " + then
}

// sourceDescription is the Describe of f's Source when it runs one.
func (f *function) sourceDescription() string {
	if f.source != nil && f.origin == "code" {
		return f.source.Describe
	}
	return ""
}
