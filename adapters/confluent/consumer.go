package confluent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/redeliver-go/redeliver/adapters/internal/kafkaadapter"
	"github.com/redeliver-go/redeliver/internal/health"
	"github.com/redeliver-go/redeliver/stream"
)

// errNotMade is what the methods of a Consumer not made by New return.
var errNotMade = errors.New("confluent: the Consumer was not made by confluent.New: build it with confluent.New(proc, options...)")

// errClosed is what Run returns when Close came first.
var errClosed = fmt.Errorf("confluent: consumer %w", stream.ErrClosed)

// Option configures a [Consumer].
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// config is what the options set; its fields are documented on them.
type config struct {
	conf                 kafka.ConfigMap
	topics               []string
	groupSet             bool
	kafkaadapter.Options // the options every adapter takes
	// commitInterval and commitRecords are the commit window
	// (WithCommitWindow).
	commitInterval time.Duration
	commitRecords  int64
	// deadLetterCheck checks the topic of the processor's dead-letter
	// action, when it has one through a Publisher of NewPublisher.
	deadLetterCheck func(context.Context) []health.Problem
	// publishers are WithPublisher's; deadLetterTopic is the topic of the
	// processor's dead-letter action when it publishes through one of
	// them, checked at start through the consumer's brokers.
	publishers      []*Publisher
	deadLetterTopic string
}

// WithGroup sets the consumer: librdkafka's configuration (conf, which
// must name bootstrap.servers and group.id, and may set any other
// property of a consumer: security, session.timeout.ms,
// partition.assignment.strategy, group.instance.id, auto.offset.reset,
// isolation.level, fetch settings) and the topics it consumes. It is
// required. The consumer works on a copy of conf, in which it sets
// enable.auto.commit and enable.auto.offset.store to false (it commits
// itself, with the retry state, see [WithCommitWindow]), and, unless conf
// sets it, fetch.queue.backoff.ms to 10: librdkafka's default of a second
// stalls the consumer for up to that long whenever librdkafka's queue of
// records fetched ahead fills up (queued.min.messages), which happens with
// several partitions.
func WithGroup(conf kafka.ConfigMap, topics ...string) Option {
	return optionFunc(func(c *config) {
		c.conf = make(kafka.ConfigMap, len(conf))
		for k, v := range conf {
			c.conf[k] = v
		}
		c.topics, c.groupSet = append([]string(nil), topics...), true
	})
}

// WithMaxBatch sets the most records a batch holds, overriding the default
// 500.
func WithMaxBatch(n int) Option {
	return optionFunc(func(c *config) { c.MaxBatch = n })
}

// WithMaxWait sets how long a partition's worker waits for a batch to fill up
// to the maximum once its first record is there, overriding the default 0: a
// batch is whatever has been polled, up to the maximum.
func WithMaxWait(d time.Duration) Option {
	return optionFunc(func(c *config) { c.MaxWait = d })
}

// WithCommitTimeout bounds the wait for one offset commit's answer (the
// request itself goes on) and the read of newly assigned partitions'
// committed offsets, overriding the default 10s. A shutdown waits for a
// commit in flight at most 250ms. It does not bound a revocation's wait
// for a handler: see the package documentation.
func WithCommitTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.CommitTimeout = d })
}

// WithCommitWindow bounds the records a crash delivers again. A batch that
// succeeds carries no retry state, so its commit need not be written before
// the next batch is delivered: such commits are coalesced and written in
// the background, one request in flight per partition, as soon as records
// have passed since the last one sent, interval has passed, or the
// partition is caught up (nothing buffered, and everything up to the high
// watermark of librdkafka's last fetch of it polled), and always before
// the partition is given up (revocation, shutdown). While a commit is in
// flight (or failed), the records after it are held to the window too:
// once they reach it, the next commit is written before the next batch is
// delivered. A crash (the process killed, the machine lost) therefore
// delivers again at most the records of the commit in flight and one
// window after it, about twice the window; none is lost and no retry count
// is reset.
// So does a consumer that loses its place in the group before they are
// written (its session expired, its connections cut): the broker refuses
// its last commit, and the consumer logs at Warn that it was not written.
// A commit that carries a retry state is written before the next
// delivery, as always; the first success after one (it clears the state)
// is sent at once and not waited for: a crash before it lands makes the
// next owner count the retry as made, as a crash during the retry does
// (the success after a give-up or a halt is waited for). There is no window
// by default: every commit is written before the next batch is delivered, as
// WithCommitWindow(0, 0) asks, so that a crash delivers again no more than
// the batch in flight. WithCommitWindow(500*time.Millisecond, 50000) is the
// window docs/BENCHMARKS.md measures. New returns an error when one is 0
// and not the other, or either is negative.
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
	return optionFunc(func(c *config) { c.commitInterval, c.commitRecords = interval, int64(records) })
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
	return optionFunc(func(c *config) { c.FailAfter = d })
}

// WithDrain sets how long Run waits, once it is stopping, for the workers
// to return; the default is 25s (a host's default drain time,
// host.DefaultDrain), and 0 waits as long as they take. A worker whose
// handler ignores the end of its context holds Run: while Run waits, it
// logs at Warn which partitions it waits for and for how long (2s after
// the stop, then every 5s); after d it logs at Error, closes librdkafka's
// consumer (the member leaves the group, and another member gets the
// partitions and delivers their batches again, never committed), leaves
// the workers running and returns an error that names them. A worker
// that returns afterwards finds the consumer closed: it commits nothing.
// A host gives its own drain time (host.WithDrain) to the consumers it
// runs. New returns an error for a negative d.
func WithDrain(d time.Duration) Option {
	return optionFunc(func(c *config) { c.Drain = d })
}

// WithLogger sets the logger. The default is the processor's logger
// ([stream.Processor.Logger]).
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) { c.Logger = l })
}

// WithOnAssigned sets a function the consumer calls each time partitions
// are assigned to it (librdkafka's rebalance callback), with all the
// partitions it owns then, before the new ones' workers start. A functions
// host uses it to report readiness. fn runs on the consumer's poll
// goroutine and must be quick. The default is none.
func WithOnAssigned(fn func(assigned map[string][]int32)) Option {
	return optionFunc(func(c *config) { c.OnAssigned = fn })
}

// WithPublisher binds pub, an unbound [Publisher]
// (new(confluent.Publisher)), to the consumer, so that a dead-letter
// action made before the consumer produces through a producer the
// consumer makes: the same way the franz-go and kafka-go adapters'
// WithPublisher do.
//
// The consumer makes one [kafka.Producer] for the publishers it is given
// when Run starts, and when Run ends flushes it (waiting at most 400ms for
// the delivery reports of what it holds) and closes it, once the Produce
// calls in progress have returned; Run waits for that at most a second,
// then leaves the producer to close on its own. Before Run starts and after
// it has returned, Publish returns an error that says so. The producer's
// configuration takes from the consumer's ([WithGroup]) its
// bootstrap.servers and security settings only (security.protocol, ssl.*,
// sasl.*, enable.ssl.certificate.verification), and sets acks=all (every
// in-sync replica acknowledges a dead letter before the checkpoint moves
// past its batch) and enable.idempotence=true (a retried send writes no
// dead letter twice); the rest is librdkafka's defaults (a record's report
// waits at most message.timeout.ms, 300s). An error librdkafka reports on
// the producer is logged: a fatal one (its idempotence refused by the
// brokers, say; every dead letter fails from then on) at Error, the
// others at Debug. For other producer settings, make the producer
// yourself and use [NewPublisher].
//
// New returns an error when pub is nil, has a producer of its own
// ([NewPublisher]) or is bound to another consumer; and, without
// WithPublisher, when the processor dead-letters through a Publisher bound
// to nothing.
func WithPublisher(pub *Publisher) Option {
	return optionFunc(func(c *config) { c.publishers = append(c.publishers, pub) })
}

// Consumer runs a [stream.Processor] over the partitions a
// confluent-kafka-go (librdkafka) consumer group assigns it: one worker
// goroutine per assigned partition, started in the rebalance callback once
// the partition's committed offset and metadata have been read, and
// stopped (its context cancelled, then waited for) before the callback
// gives the partition up, or when the consumer stops.
//
// A Consumer is safe for concurrent use. [Consumer.Run] may be called once;
// [Consumer.Close] may be called from anywhere, a handler included. Its
// zero value is not usable: its methods return an error that says to call
// [New].
type Consumer struct {
	e *engine
}

// New returns a Consumer that runs proc over the partitions of the consumer
// group given by [WithGroup]. It returns an error, and never panics, when
// proc is nil, an option is nil, the group is not given or its
// configuration names no bootstrap.servers or group.id, no topic or an
// empty one is given, or an option is out of range.
func New(proc *stream.Processor, opts ...Option) (*Consumer, error) {
	cfg := config{Options: kafkaadapter.Defaults(),
		commitInterval: kafkaadapter.DefaultCommitInterval, commitRecords: kafkaadapter.DefaultCommitRecords}
	for i, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("confluent: option %d of New is nil", i+1)
		}
		o.apply(&cfg)
	}
	for _, pub := range cfg.publishers {
		if pub == nil {
			return nil, errors.New("confluent: WithPublisher: nil publisher")
		}
	}
	if proc != nil {
		if pub, topic, ok := proc.DeadLetter(); ok {
			if cp, isConfluent := pub.(*Publisher); isConfluent && cp != nil {
				switch {
				case cp.p != nil:
					cfg.deadLetterCheck = func(ctx context.Context) []health.Problem { return cp.checkTopic(ctx, topic) }
				case slices.Contains(cfg.publishers, cp):
					cfg.deadLetterTopic = topic
				case cp.bound() == nil:
					// It would fail every record given up, for ever.
					return nil, fmt.Errorf("confluent: the processor dead-letters to %q through a confluent.Publisher bound to nothing: give it to New with WithPublisher(pub), or make it with NewPublisher(producer)", topic)
				}
			}
		}
	}
	e, err := newEngine(proc, cfg)
	if err != nil {
		return nil, err
	}
	if e.owned != nil {
		for i, pub := range cfg.publishers {
			if err := pub.bind(e.owned); err != nil {
				for _, done := range cfg.publishers[:i] {
					done.unbind(e.owned)
				}
				return nil, err
			}
		}
	}
	return &Consumer{e: e}, nil
}

// Run subscribes to the topics and runs a worker per assigned partition
// until ctx is done, [Consumer.Close] is called, or a worker fails. On
// return, every worker has stopped, its batch in flight abandoned without
// a commit.
//
// Run returns nil after a clean shutdown: ctx done (cancelled or past its
// deadline) or [Consumer.Close] called. Otherwise it returns the error that
// stopped it: a worker's failure, or a fatal error of librdkafka. It
// returns [stream.ErrClosed] when Close was called before it. It may be
// called once.
func (c *Consumer) Run(ctx context.Context) error {
	if c == nil || c.e == nil {
		return errNotMade
	}
	return c.e.life.Run(ctx, c.e.run)
}

// Health reports what the consumer knows to be wrong now, or nil: for a
// host's readiness, say. Run checks at start, and again every 2s until the
// checks pass, that the brokers answer (within 5s) and that the group's
// topics exist, and, when the processor's exhaustion action is a
// [stream.DeadLetter] through a [Publisher], that its topic exists (asked
// through the publisher's producer, or the consumer's brokers for one
// given with [WithPublisher]); it logs each problem when it finds
// it, at Error for brokers that do not answer and at Warn for a topic, and
// at Info when it is gone. The error joins one error per problem. Health
// is safe for concurrent use; it returns an error for a Consumer not made
// by [New].
func (c *Consumer) Health() error {
	if c == nil || c.e == nil {
		return errNotMade
	}
	return c.e.checks.Err()
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
	c.e.life.Close()
	return nil
}
