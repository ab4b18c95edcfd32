// Package kafkaadapter holds what the Kafka adapters built on a client's
// consumer group (adapters/kafkago, adapters/sarama, adapters/confluent)
// and their host modules do alike: the options every adapter takes beside
// its client's configuration and their checks, the partitions whose
// consumption fails (for Health), the start check beside the dead-letter
// topic's, the host triggers' common options and refusals, and the
// binding of a Publisher given with WithPublisher to the producer its
// consumer makes (sarama's and confluent's: [Binding], [Owned]).
//
// It is part of the root module (it has no go.mod of its own), so that
// every adapter, which requires the root module anyway, builds it alone;
// being under adapters/internal, only the adapters may import it. It
// imports no Kafka client.
package kafkaadapter

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/redeliver-go/redeliver/internal/health"
	"github.com/redeliver-go/redeliver/internal/lifecycle"
)

// Options are the options of a consumer beside its client's configuration,
// as its package's With functions set them.
type Options struct {
	MaxBatch      int
	MaxWait       time.Duration
	CommitTimeout time.Duration
	Drain         time.Duration // 0: no bound
	FailAfter     time.Duration // 0: never
	Logger        *slog.Logger
	OnAssigned    func(map[string][]int32)
}

// Defaults are the options' defaults: batches of at most 500 records
// handed over as soon as there are records, commits bounded by 10s, the
// host's default drain time and the health checker's time to end Run.
func Defaults() Options {
	return Options{MaxBatch: 500, CommitTimeout: 10 * time.Second, Drain: lifecycle.DefaultDrain, FailAfter: health.DefaultEndAfter}
}

// Check returns an error naming the option (as pkg.WithX) of the first
// option out of range, or nil.
func (o Options) Check(pkg string) error {
	switch {
	case o.MaxBatch < 1:
		return fmt.Errorf("%s: WithMaxBatch(%d): want 1 or more", pkg, o.MaxBatch)
	case o.MaxWait < 0:
		return fmt.Errorf("%s: WithMaxWait(%v): want 0 or more", pkg, o.MaxWait)
	case o.CommitTimeout <= 0:
		return fmt.Errorf("%s: WithCommitTimeout(%v): want more than 0", pkg, o.CommitTimeout)
	case o.Drain < 0:
		return fmt.Errorf("%s: WithDrain(%v): want 0 (no bound) or more", pkg, o.Drain)
	case o.FailAfter < 0:
		return fmt.Errorf("%s: WithFailAfter(%v): want 0 (never) or more", pkg, o.FailAfter)
	}
	return nil
}

// CheckTopics returns an error for an empty topic, naming it by its place
// among the topics given to pkg's WithGroup, or nil.
func CheckTopics(pkg string, topics []string) error {
	for i, t := range topics {
		if t == "" {
			return fmt.Errorf("%s: WithGroup's topic %d is empty", pkg, i+1)
		}
	}
	return nil
}

// Partition names a partition.
type Partition struct {
	Topic     string
	Partition int32
}

// Failing are the partitions whose consumption fails now, each with its
// error and since when, for a consumer's Health. Its zero value is ready
// to use; it is safe for concurrent use.
type Failing struct {
	mu sync.Mutex
	m  map[Partition]failure
}

type failure struct {
	err   error
	since time.Time
}

// Set records the partition's error and since when it fails, replacing
// what was recorded.
func (f *Failing) Set(p Partition, err error, since time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.m == nil {
		f.m = make(map[Partition]failure)
	}
	f.m[p] = failure{err, since}
}

// Add records the partition's error, failing since at, unless the
// partition is failing already: then it keeps the first error and time.
func (f *Failing) Add(p Partition, err error, at time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.m == nil {
		f.m = make(map[Partition]failure)
	}
	if _, ok := f.m[p]; !ok {
		f.m[p] = failure{err, at}
	}
}

// Clear forgets the partition's failure.
func (f *Failing) Clear(p Partition) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.m, p)
}

// Errs returns an error per failing partition, by topic and partition:
// "<pkg>: <verb> <topic>/<partition> fails since <how long> ago: <error>".
func (f *Failing) Errs(now time.Time, pkg, verb string) []error {
	f.mu.Lock()
	defer f.mu.Unlock()
	keys := make([]Partition, 0, len(f.m))
	for k := range f.m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b Partition) int {
		return cmp.Or(cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
	})
	out := make([]error, 0, len(keys))
	for _, k := range keys {
		p := f.m[k]
		out = append(out, fmt.Errorf("%s: %s %s/%d fails since %v ago: %w", pkg, verb, k.Topic, k.Partition, now.Sub(p.since).Round(time.Second), p.err))
	}
	return out
}

// CheckBeside runs the start check of the group's topics and, beside it
// on a goroutine of its own, the check of the dead-letter topic through
// its publisher (which may write to another cluster), when deadLetter is
// not nil; it returns the topics' problems, then the dead-letter topic's.
func CheckBeside(ctx context.Context, topics, deadLetter func(context.Context) []health.Problem) []health.Problem {
	if deadLetter == nil {
		return topics(ctx)
	}
	var dl []health.Problem
	done := make(chan struct{})
	go func() {
		defer close(done)
		dl = deadLetter(ctx)
	}()
	ps := topics(ctx)
	<-done
	return append(ps, dl...)
}

// NoShareGroups is the error of a host module (pkg, such as "saramahost")
// whose client has no share-group consumer, for a share-group trigger.
func NoShareGroups(pkg, client string) error {
	return fmt.Errorf(`%s: %s has no share-group consumer: a share group needs the franz adapter ("adapter": "franz", module github.com/redeliver-go/redeliver/adapters/franz/franzhost)`, pkg, client)
}

// NotNew is the error of a host module's Adapter that its New did not
// make.
func NotNew(pkg string) error {
	return fmt.Errorf("%s: this Adapter was not made by %s.New: create it with %s.New(options...)", pkg, pkg, pkg)
}

// CheckNilOptions returns an error naming the place of the first nil
// option among opts given to pkg's New, or nil.
func CheckNilOptions[O comparable](pkg string, opts []O) error {
	var zero O
	for i, o := range opts {
		if o == zero {
			return fmt.Errorf("%s: option %d of %d is nil", pkg, i+1, len(opts))
		}
	}
	return nil
}

// NilFunction is the error of a host module's option given a nil function.
func NilFunction(pkg, option string) error {
	return fmt.Errorf("%s: %s: nil function", pkg, option)
}

// Trigger is what a host's trigger sets on its adapter's consumer.
type Trigger struct {
	Logger   *slog.Logger // nil: the adapter's default
	OnReady  func()       // nil: nothing; called at each assignment
	Drain    time.Duration
	MaxBatch int
}

// TriggerOptions returns an adapter's options for t, through its With
// functions: the logger when t has one, OnReady at each assignment, the
// host's drain time, and the trigger's maximum batch when it sets one.
func TriggerOptions[O any](t Trigger, withLogger func(*slog.Logger) O, withOnAssigned func(func(map[string][]int32)) O,
	withDrain func(time.Duration) O, withMaxBatch func(int) O) []O {
	ready := t.OnReady
	if ready == nil {
		ready = func() {}
	}
	opts := []O{withOnAssigned(func(map[string][]int32) { ready() })}
	if t.Logger != nil {
		opts = append(opts, withLogger(t.Logger))
	}
	if t.Drain > 0 {
		opts = append(opts, withDrain(t.Drain)) // the host's drain time
	}
	if t.MaxBatch > 0 {
		opts = append(opts, withMaxBatch(t.MaxBatch))
	}
	return opts
}

// Revocation returns a channel closed when claim ends while run has not:
// the claim was revoked or lost, and a commit it waits for, other than
// its last, stops waiting (issue 51). A claim ended by a shutdown (run
// done) leaves the channel open: a shutdown waits for a commit in flight
// up to its own bound, so that a commit the broker answers soon is
// reported. stop releases the channel's watch; call it once the commit
// has returned.
func Revocation(claim, run context.Context) (revoked <-chan struct{}, stop func() bool) {
	ch := make(chan struct{})
	stop = context.AfterFunc(claim, func() {
		if run.Err() == nil {
			close(ch)
		}
	})
	return ch, stop
}
