package kafkago

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/redeliver-go/redeliver/adapters/kafkago/internal/engine"
	"github.com/redeliver-go/redeliver/internal/health"
	"github.com/redeliver-go/redeliver/stream"
)

// errNotMade is what the methods of a Consumer not made by New return.
var errNotMade = errors.New("kafkago: the Consumer was not made by kafkago.New: build it with kafkago.New(proc, options...)")

// Option configures a [Consumer].
type Option interface{ apply(*engine.Config) }

type optionFunc func(*engine.Config)

func (f optionFunc) apply(c *engine.Config) { f(c) }

// WithGroupConfig sets the kafka-go consumer group: its ID, brokers and
// topics (required), and optionally its dialer, balancers, heartbeat
// interval, session and rebalance timeouts, start offset and the rest of
// [kafka.ConsumerGroupConfig]. It is required. The consumer creates the
// [kafka.ConsumerGroup] in [Consumer.Run] and closes it when Run returns.
func WithGroupConfig(cfg kafka.ConsumerGroupConfig) Option {
	return optionFunc(func(c *engine.Config) { c.Group = cfg; c.GroupSet = true })
}

// WithFetchConfig sets the fetch requests that read each assigned
// partition from its leader: MinBytes (default 1), MaxBytes (default 1MB,
// the most a fetch answer holds, though a first record larger than it still
// comes), MaxWait (default 10s, how long the broker may wait for MinBytes)
// and IsolationLevel (default kafka.ReadUncommitted), with kafka.Reader's
// defaults. Fields left at zero keep their default.
func WithFetchConfig(cfg kafka.ReadBatchConfig) Option {
	return optionFunc(func(c *engine.Config) { c.Fetch = cfg })
}

// WithClient sets the client the consumer sends offset fetches and commits
// with. Its Addr must reach the group's cluster; the requests go to the
// group's coordinator. The default is a client on the group's brokers whose
// transport takes DialFunc, Timeout, TLS, SASL and the client ID from the
// group's dialer; the consumer closes its idle connections when Run
// returns. A client given here is not closed. [New] refuses a nil client
// and one without an Addr.
func WithClient(cl *kafka.Client) Option {
	return optionFunc(func(c *engine.Config) { c.Client, c.ClientSet = cl, true })
}

// WithMaxBatch sets the most records a batch holds, overriding the default
// 500.
func WithMaxBatch(n int) Option {
	return optionFunc(func(c *engine.Config) { c.MaxBatch = n })
}

// WithMaxWait sets how long a partition's worker waits for a batch to fill up
// to the maximum once its first record is there, overriding the default 0: a
// batch is whatever has been fetched, up to the maximum.
func WithMaxWait(d time.Duration) Option {
	return optionFunc(func(c *engine.Config) { c.MaxWait = d })
}

// WithCommitTimeout bounds one offset commit, overriding the default 10s. A
// commit that was sent is not cancelled by the end of its generation: the
// end waits for it, for at most this long. A shutdown waits for it at most
// 250ms, then cuts it short.
func WithCommitTimeout(d time.Duration) Option {
	return optionFunc(func(c *engine.Config) { c.CommitTimeout = d })
}

// WithCommitWindow bounds the records a crash delivers again. A batch that
// succeeds carries no retry state, so its commit need not be written before
// the next batch is delivered: such commits are coalesced and written in
// the background, one request in flight per partition, as soon as records
// have passed since the last one sent, interval has passed, or the
// partition has nothing more buffered (it is caught up), and always before
// the partition is given up (the generation's end, shutdown). While a commit is in
// flight (or failed), the records after it are held to the window too: once
// they reach it, the next commit is written before the next batch is
// delivered. A crash (the process killed, the machine lost) therefore
// delivers again at most the records of the commit in flight and one window
// after it, about twice the window; none is lost and no retry count is
// reset.
// So does a consumer that loses its place in the group before they are
// written (its session expired, its connections cut): the broker refuses
// its last commit, and the consumer logs at Warn that it was not written.
// A commit that
// carries a retry state is written before the next delivery, as always;
// the first success after one (it clears the state) is sent at once and
// not waited for: a crash before it lands makes the next owner count the
// retry as made, as a crash during the retry does (the success after a
// give-up or a halt is waited for). There is no
// window by default: every commit is written before the next batch is
// delivered, as WithCommitWindow(0, 0) asks, so that a crash delivers
// again no more than the batch in flight. WithCommitWindow(500*time.Millisecond,
// 50000) is the window docs/BENCHMARKS.md measures, about as fast as a
// loop that marks records and lets the client commit them.
//
// In key ordering (stream.ByKey, stream.ByNone) a commit is a window of
// the partition's records: one that only adds finished records, every
// retrying record's state as the last commit wrote it, is coalesced the
// same way, with its metadata; one that records a failure, a retry
// started or a give-up is written before the record's retry.
//
// The Checkpointed hook reports a coalesced commit when the adapter takes
// it, before it is written.
func WithCommitWindow(interval time.Duration, records int) Option {
	return optionFunc(func(c *engine.Config) { c.CommitInterval, c.CommitRecords = interval, int64(records) })
}

// WithFailAfter sets how long a problem that stops all consumption may
// last before Run ends with its error: the brokers do not answer, or a
// topic the consumer reads does not exist or may not be read. While it
// lasts, the problem is logged when first found and again every 30s with
// how long it has lasted, and [Consumer.Health] reports it; after d, Run
// logs it at Error and returns it, so that a supervisor sees a failed
// process, not a healthy idle one. The default is a minute; 0 never ends
// Run for it. New returns an error for a negative d.
func WithFailAfter(d time.Duration) Option {
	return optionFunc(func(c *engine.Config) { c.FailAfter = d })
}

// WithPublisher gives pub, an empty Publisher (new(kafkago.Publisher)), a
// writer on the consumer's brokers and transport, so that a dead-letter
// action made before the consumer produces through it; the same way franz's
// WithPublisher binds a Publisher to the consumer's client. The writer
// waits for every in-sync replica's acknowledgement (kafka.RequireAll) and
// batches for [PublisherBatchTimeout]. New returns an error when pub is nil
// or has a writer already.
func WithPublisher(pub *Publisher) Option {
	return publisherOption{pub}
}

// publisherOption is WithPublisher's option: New binds its publisher once
// the consumer has its client.
type publisherOption struct{ pub *Publisher }

func (publisherOption) apply(*engine.Config) {}

// publishersOf returns the publishers of opts' WithPublisher options.
func publishersOf(opts []Option) []*Publisher {
	var out []*Publisher
	for _, o := range opts {
		if p, ok := o.(publisherOption); ok {
			out = append(out, p.pub)
		}
	}
	return out
}

// WithDrain sets how long Run waits, once it is stopping, for the workers
// to return; the default is 25s (a host's default drain time,
// host.DefaultDrain), and 0 waits as long as they take. A worker whose
// handler ignores the end of its context holds Run: while Run waits, it
// logs at Warn which partitions it waits for and for how long (2s after
// the stop, then every 5s); after d it logs at Error, closes the group's
// connections, leaves the workers running and returns an error that names
// them. A host gives its own drain time (host.WithDrain) to the
// consumers it runs. New returns an error for a negative d.
func WithDrain(d time.Duration) Option {
	return optionFunc(func(c *engine.Config) { c.Drain = d })
}

// WithLogger sets the logger. The default is the processor's logger
// ([stream.Processor.Logger]).
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *engine.Config) { c.Logger = l })
}

// WithOnAssigned sets a function the consumer calls each time it has joined
// a generation of its group, with the partitions assigned to it (none is
// possible: a group may have more members than partitions), before their
// workers start. A functions host uses it to report readiness. fn runs on
// the consumer's goroutine and must be quick. The default is none.
func WithOnAssigned(fn func(assigned map[string][]int32)) Option {
	return optionFunc(func(c *engine.Config) { c.OnAssigned = fn })
}

// Consumer runs a [stream.Processor] over the partitions a kafka-go consumer
// group assigns it: for each generation, one worker goroutine per assigned
// partition, started once the partition's committed offset and metadata
// have been fetched, and stopped (its context cancelled, then waited for)
// when the generation ends or the consumer stops.
//
// A Consumer is safe for concurrent use. [Consumer.Run] may be called once;
// [Consumer.Close] may be called from anywhere, a handler included. Its
// zero value is not usable: its methods return an error that says to call
// [New].
type Consumer struct {
	e *engine.Consumer
}

// New returns a Consumer that runs proc over the partitions of the consumer
// group given by [WithGroupConfig]. It returns an error, and never panics,
// when proc is nil, an option is nil, the group is not given, an option is
// out of range, or the group or fetch configuration is one kafka-go would
// reject.
func New(proc *stream.Processor, opts ...Option) (*Consumer, error) {
	cfg := engine.DefaultConfig()
	for i, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("kafkago: option %d of New is nil", i+1)
		}
		o.apply(&cfg)
	}
	pubs := publishersOf(opts)
	for _, p := range pubs {
		if p == nil {
			return nil, errors.New("kafkago: WithPublisher: nil publisher")
		}
	}
	var dlq *Publisher
	var dlqTopic string
	if proc != nil {
		if pub, topic, ok := proc.DeadLetter(); ok {
			if kp, isKafkago := pub.(*Publisher); isKafkago && kp != nil {
				dlq, dlqTopic = kp, topic
				if kp.writer() != nil || slices.Contains(pubs, kp) {
					cfg.DeadLetterCheck = func(ctx context.Context) []health.Problem { return kp.checkTopic(ctx, topic) }
				}
			}
		}
	}
	e, err := engine.New(proc, cfg)
	if err != nil {
		return nil, err
	}
	for _, p := range pubs {
		if err := p.bind(e.Client()); err != nil {
			return nil, err
		}
	}
	if dlq != nil && dlq.writer() == nil {
		return nil, fmt.Errorf("kafkago: the processor dead-letters to %q through a Publisher with no writer: give it to New with WithPublisher, or build it with NewPublisher", dlqTopic)
	}
	return &Consumer{e: e}, nil
}

// Run joins the group and runs a worker per assigned partition, generation
// after generation, until ctx is done, [Consumer.Close] is called, or a
// worker fails. On return, every worker has stopped, its batch in flight
// abandoned without a commit, and the consumer has left the group.
//
// Run returns nil after a clean shutdown: ctx done (cancelled or past its
// deadline) or [Consumer.Close] called. Otherwise it returns the error that
// stopped it, a worker's failure. It returns [stream.ErrClosed] when Close was
// called before it. It may be called once.
func (c *Consumer) Run(ctx context.Context) error {
	if c == nil || c.e == nil {
		return errNotMade
	}
	return c.e.Run(ctx)
}

// Health reports what the consumer knows to be wrong now, or nil: for a
// host's readiness, say. Run checks at start, and again every 2s until the
// checks pass, that the brokers answer (within 5s) and that the group's
// topics exist and may be read, and, when the processor's exhaustion action
// is a [stream.DeadLetter] through a [Publisher], that its topic exists
// (asked through the publisher's writer); it logs each problem when it finds it, at
// Error for brokers that do not answer and at Warn for a topic, and at
// Info when it is gone. While Run runs, a partition whose fetches fail is
// reported too, until one succeeds (see the package doc). The error joins
// one error per problem. Health is safe for concurrent use; it returns an
// error for a Consumer not made by [New].
func (c *Consumer) Health() error {
	if c == nil || c.e == nil {
		return errNotMade
	}
	return c.e.Health()
}

// Close stops [Consumer.Run] if it runs and waits for it to return. Close is
// idempotent and may be called from anywhere: called from a goroutine Run
// waits for (a handler, a hook of the processor, the WithOnAssigned
// function), it stops Run and returns without waiting for it. It returns
// an error only for a Consumer not made by [New].
func (c *Consumer) Close() error {
	if c == nil || c.e == nil {
		return errNotMade
	}
	c.e.Close()
	return nil
}
