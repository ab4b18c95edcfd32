package sarama

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/IBM/sarama"

	"github.com/redeliver-go/redeliver/adapters/internal/kafkaadapter"
	"github.com/redeliver-go/redeliver/internal/health"
	"github.com/redeliver-go/redeliver/stream"
)

// errNotMade is what the methods of a Consumer not made by New return.
var errNotMade = errors.New("sarama: the Consumer was not made by sarama.New: build it with sarama.New(proc, options...)")

// errClosed is what Run returns when Close came first.
var errClosed = fmt.Errorf("sarama: consumer %w", stream.ErrClosed)

// Option configures a [Consumer].
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// config is what the options set; its fields are documented on them.
type config struct {
	brokers              []string
	group                string
	topics               []string
	groupSet             bool
	sarama               *sarama.Config
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

// WithGroup sets the consumer group: the brokers to start from, the
// group's ID and the topics it consumes. It is required.
func WithGroup(brokers []string, groupID string, topics ...string) Option {
	return optionFunc(func(c *config) {
		c.brokers, c.group, c.topics, c.groupSet = append([]string(nil), brokers...), groupID, append([]string(nil), topics...), true
	})
}

// WithConfig sets sarama's configuration of the client the consumer makes
// in [Consumer.Run]: its Version, network settings (TLS, SASL),
// Consumer.Group settings (rebalance strategies, session and heartbeat
// timing, static membership), Consumer.Offsets.Initial (where a partition
// without a commit starts: sarama's default is the partition's end,
// sarama.OffsetNewest; set sarama.OffsetOldest to start at its start),
// Consumer.IsolationLevel and fetch sizes. The consumer works on a copy,
// in which it sets Consumer.Offsets.AutoCommit.Enable to false (it commits
// itself, with the retry state, see [WithCommitWindow]) and Consumer.Return.Errors to
// true (it logs them). The default is sarama.NewConfig(). [New] refuses a
// nil config and one whose Validate fails.
func WithConfig(cfg *sarama.Config) Option {
	return optionFunc(func(c *config) {
		if cfg == nil {
			c.sarama = nil
			return
		}
		cp := *cfg
		c.sarama = &cp
	})
}

// WithMaxBatch sets the most records a batch holds, overriding the default
// 500.
func WithMaxBatch(n int) Option {
	return optionFunc(func(c *config) { c.MaxBatch = n })
}

// WithMaxWait sets how long a partition's worker waits for a batch to fill up
// to the maximum once its first record is there, overriding the default 0: a
// batch is whatever has been fetched, up to the maximum.
func WithMaxWait(d time.Duration) Option {
	return optionFunc(func(c *config) { c.MaxWait = d })
}

// WithCommitTimeout bounds one offset commit, overriding the default 10s.
// A rebalance waits for a commit in flight, for at most this long; a
// shutdown waits for it at most 250ms, then cuts it short.
func WithCommitTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.CommitTimeout = d })
}

// WithCommitWindow bounds the records a crash delivers again. A batch that
// succeeds carries no retry state, so its commit need not be written before
// the next batch is delivered: such commits are coalesced and written in
// the background, one request in flight per partition, as soon as records
// have passed since the last one sent, interval has passed, or the
// partition has nothing more delivered (it is caught up), and always before
// the partition is given up (the session's end, revocation, shutdown).
// While a commit is in flight (or failed), the records after it are held
// to the window too: once they reach it, the next commit is written before
// the next batch is delivered. A crash (the process killed, the machine
// lost) therefore delivers again at most the records of the commit in
// flight and one window after it, about twice the window; none is lost and
// no retry count is reset.
// So does a consumer that loses its place in the group before they are
// written (its session expired, its connections cut): the broker refuses
// its last commit, and the consumer logs at Warn that it was not written.
// A commit that carries a retry state is written
// before the next delivery, as always; the first success after one (it
// clears the state) is sent at once and not waited for: a crash before it
// lands makes the next owner count the retry as made, as a crash during
// the retry does (the success after a give-up or a halt is waited for). There
// is no window by default: every commit is written before the next batch is
// delivered, as WithCommitWindow(0, 0) asks, so that a crash delivers
// again no more than the batch in flight.
// WithCommitWindow(500*time.Millisecond, 50000) is the window
// docs/BENCHMARKS.md measures. New returns an error when one is 0 and
// not the other, or either is negative.
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
// the stop, then every 5s); after d it logs at Error, closes the client's
// connections, leaves the workers running and returns an error that names
// them. A host gives its own drain time (host.WithDrain) to the consumers
// it runs. New returns an error for a negative d.
func WithDrain(d time.Duration) Option {
	return optionFunc(func(c *config) { c.Drain = d })
}

// WithLogger sets the logger. The default is the processor's logger
// ([stream.Processor.Logger]).
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) { c.Logger = l })
}

// WithOnAssigned sets a function the consumer calls each time it has joined
// a generation of its group (sarama's ConsumerGroupHandler.Setup), with the
// partitions assigned to it (none is possible: a group may have more
// members than partitions), before their workers start. A functions host
// uses it to report readiness. fn runs on sarama's goroutine and must be
// quick. Under the cooperative protocol, Setup, and so fn, runs once per
// session, not at each rebalance. The default is none.
func WithOnAssigned(fn func(assigned map[string][]int32)) Option {
	return optionFunc(func(c *config) { c.OnAssigned = fn })
}

// WithPublisher binds pub, an unbound [Publisher] (new(sarama.Publisher)),
// to the consumer, so that a dead-letter action made before the consumer
// produces through a producer the consumer makes: the same way the
// franz-go and kafka-go adapters' WithPublisher do.
//
// The consumer makes one [sarama.SyncProducer] for the publishers it is
// given, with a client of its own on the group's brokers, when Run has
// reached them, and closes it when Run returns (once the sends in flight
// have returned: Run waits for that at most 400ms, then leaves the
// producer to close on its own). Before Run has reached the brokers and
// after it has returned, Publish returns an error that says so. The
// producer's configuration is a copy of the consumer's ([WithConfig], or
// sarama.NewConfig()), with its Version, network settings (TLS, SASL),
// client ID, metadata settings and Producer settings (partitioner,
// compression, timeouts, retries), in which the consumer sets:
// Producer.RequiredAcks to sarama.WaitForAll (every in-sync replica
// acknowledges a dead letter before the checkpoint moves past its
// batch), Producer.Return.Successes and Producer.Return.Errors to true (a
// SyncProducer needs them), Producer.Transaction.ID to "" (no
// transactions), and Producer.Idempotent to true, with Net.MaxOpenRequests
// 1, when the configuration allows it (Version at least sarama.V0_11_0_0
// and Producer.Retry.Max at least 1; sarama's defaults do), so that a
// retried send writes no dead letter twice. A producer the brokers refuse
// (idempotence not allowed to the client, say) holds Run before it joins
// the group: it tries again every second, says so at Warn with the
// broker's error, then every 30s while it lasts, and ends Run with that
// error after [WithFailAfter] (a minute by default), as a problem that
// stops all consumption does.
//
// New returns an error when pub is nil, has a producer of its own
// ([NewPublisher]) or is bound to another consumer; and, without
// WithPublisher, when the processor dead-letters through a Publisher
// bound to nothing.
func WithPublisher(pub *Publisher) Option {
	return optionFunc(func(c *config) { c.publishers = append(c.publishers, pub) })
}

// Consumer runs a [stream.Processor] over the partitions a sarama consumer
// group assigns it: one worker goroutine per assigned partition, running in
// sarama's ConsumeClaim for the partition, stopped (its context cancelled,
// then waited for) when the partition is revoked or the consumer stops.
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
// proc is nil, an option is nil, the group is not given or names no
// brokers, no group ID or no topic, an option is out of range, or sarama's
// configuration is nil or one sarama would reject.
func New(proc *stream.Processor, opts ...Option) (*Consumer, error) {
	cfg := config{Options: kafkaadapter.Defaults(), sarama: sarama.NewConfig(),
		commitInterval: kafkaadapter.DefaultCommitInterval, commitRecords: kafkaadapter.DefaultCommitRecords}
	for i, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("sarama: option %d of New is nil", i+1)
		}
		o.apply(&cfg)
	}
	for _, pub := range cfg.publishers {
		if pub == nil {
			return nil, errors.New("sarama: WithPublisher: nil publisher")
		}
	}
	if proc != nil {
		if pub, topic, ok := proc.DeadLetter(); ok {
			if sp, isSarama := pub.(*Publisher); isSarama && sp != nil {
				switch {
				case sp.client != nil:
					cfg.deadLetterCheck = func(ctx context.Context) []health.Problem { return sp.checkTopic(ctx, topic) }
				case slices.Contains(cfg.publishers, sp):
					cfg.deadLetterTopic = topic
				case sp.bound() == nil:
					// It would fail every record given up, for ever.
					return nil, fmt.Errorf("sarama: the processor dead-letters to %q through a sarama.Publisher bound to nothing: give it to New with WithPublisher(pub), or make it with NewPublisher(client)", topic)
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

// Run joins the group and runs a worker per assigned partition, session
// after session, until ctx is done, [Consumer.Close] is called, or a
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
	return c.e.life.Run(ctx, c.e.run)
}

// Health reports what the consumer knows to be wrong now, or nil: for a
// host's readiness, say. Run checks at start, and again every 2s until the
// checks pass, that the brokers answer (within 5s) and that the group's
// topics exist, and, when the processor's exhaustion action is a
// [stream.DeadLetter] through a [Publisher], that its topic exists (asked
// through the publisher's client, or the group's brokers for one given
// with [WithPublisher]); it logs each problem when it finds it,
// at Error for brokers that do not answer and at Warn for a topic, and at
// Info when it is gone. While Run runs, a partition whose consumer sarama
// reports failing is reported too, until its next records come. The error
// joins one error per problem. Health is safe for concurrent use; it
// returns an error for a Consumer not made by [New].
func (c *Consumer) Health() error {
	if c == nil || c.e == nil {
		return errNotMade
	}
	return c.e.health()
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
