package franz

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redeliver-go/redeliver/adapters/franz/internal/engine"
	"github.com/redeliver-go/redeliver/adapters/franz/internal/kcheck"
	"github.com/redeliver-go/redeliver/internal/health"
	"github.com/redeliver-go/redeliver/stream"
)

// errNotMade is what the methods of a Consumer not made by New return.
var errNotMade = errors.New("franz: the Consumer was not made by franz.New: build it with franz.New(proc, options...)")

// ClientOptions returns the kgo options a client needs to serve a
// [Consumer]: autocommit off, rebalances blocked while a poll's records are
// handed out (BlockRebalanceOnPoll), control records kept
// (KeepControlRecords: the claims drop transaction markers and commit past
// them), and the callbacks that turn assignments
// into claims (OnOffsetsFetched), confirm the claims a new group session
// keeps (OnPartitionsAssigned, which franz-go calls at the end of every
// session's assignment) and end them (OnPartitionsRevoked,
// OnPartitionsLost). Add them after your own options, so that they win:
//
//	cl, err := kgo.NewClient(append(opts, franz.ClientOptions()...)...)
//
// Call it for each client: the callbacks it returns serve one client. A
// client built with them is bound to the first Consumer given it with
// [WithClient]; partitions assigned before that wait for [Consumer.Run].
// The adapter keeps no state outside the client and the Consumer: both are
// freed once neither is referenced.
func ClientOptions() []kgo.Opt { return engine.ClientOptions() }

// Option configures a [Consumer].
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	engine.Config
	publishers []*Publisher
}

// WithOnAssigned calls fn at the end of each group session's assignment
// with the partitions it newly assigned (empty when it assigned none, as
// after a rebalance that kept them all): a readiness signal. The consumer
// needs the client's own OnPartitionsAssigned (see [ClientOptions]), so a
// kgo.OnPartitionsAssigned among the caller's options is replaced; use
// this instead. fn runs in the client's group goroutine and must be quick.
// A client joins its group as soon as it is built: an assignment made
// before the Consumer was bound to it (before New returned) is reported
// from New.
func WithOnAssigned(fn func(assigned map[string][]int32)) Option {
	return optionFunc(func(c *config) { c.OnAssigned = fn })
}

// WithClient makes the consumer use cl, a group consuming client that was
// built with [ClientOptions] (added after the caller's own options). The
// consumer does not close cl: close it after [Consumer.Run] returns, since
// its partitions stay assigned to it. A client serves one Consumer, once. It
// cannot be combined with [WithKgoOptions].
func WithClient(cl *kgo.Client) Option {
	return optionFunc(func(c *config) { c.Client, c.ClientSet = cl, true })
}

// WithKgoOptions makes the consumer build its own client from opts, which
// must name a consumer group and what to consume. [ClientOptions] are added
// after opts and override any of them they touch (autocommit, the partition
// callbacks, BlockRebalanceOnPoll). Before opts comes
// kgo.FetchMaxWait(500ms), Kafka's own default (franz-go's is 5s), which
// opts may override. The consumer owns this client and closes it when
// [Consumer.Run] returns or at [Consumer.Close].
func WithKgoOptions(opts ...kgo.Opt) Option {
	return optionFunc(func(c *config) { c.Kopts = append(c.Kopts, opts...); c.KoptsSet = true })
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

// WithBufferBytes sets how much polled data a partition holds ahead of its
// worker, overriding the default 16 MiB; each record counts its key and value
// plus 256 bytes. A partition waiting out a backoff goes on buffering, so
// that its next records are there when the backoff ends. A full partition
// holds the poll loop back until its worker has taken it down to half, for
// at most 100ms while another partition could take records (the client
// fetches nothing while the loop is held): then, or at once when its worker
// waits out a backoff, the partition is paused in the client (which drops
// what franz-go had fetched for it). When no other partition could take
// records (a consumer of one partition), the loop is held until the
// partition has drained, backoff or not, and nothing is dropped. When
// another partition starves, the loop polls at once, and a partition beyond
// twice the limit is paused. So a partition holds at most about twice this
// plus one fetch. A partition resumed in the client fetches its next records with
// requests of its own, through a second client the consumer makes for this,
// until the client's fetches include it again: franz-go would leave it out
// of the fetch in flight, which can wait up to the fetch max wait.
func WithBufferBytes(n int) Option {
	return optionFunc(func(c *config) { c.BufferBytes = n })
}

// WithCommitTimeout bounds one offset commit, overriding the default 10s. A
// commit that was sent is not cancelled by a revocation: the revocation
// waits for it, for at most this long. A shutdown waits for it at most
// 250ms, then cuts it short; but with a commit window, the last success
// commit a shutdown writes for a partition (already reported written) is
// bounded by this timeout only.
func WithCommitTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.CommitTimeout = d })
}

// WithCommitWindow bounds the records a crash delivers again. A batch that
// succeeds carries no retry state, so its commit need not be written before
// the next batch is delivered: such commits are coalesced and written in
// the background, one request in flight per partition, as soon as records
// have passed since the last one sent, interval has passed, or the
// partition has nothing more buffered (it is caught up), and always before
// the partition is given up (revocation, shutdown). While a commit is in
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
	return optionFunc(func(c *config) { c.CommitInterval, c.CommitRecords = interval, int64(records) })
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
// the stop, then every 5s); after d it logs at Error, leaves them running
// and returns an error that names them. A host gives its own drain time
// (host.WithDrain) to the consumers it runs. New returns an error for a
// negative d.
func WithDrain(d time.Duration) Option {
	return optionFunc(func(c *config) { c.Drain = d })
}

// WithLogger sets the logger. The default is the processor's logger
// ([stream.Processor.Logger]).
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) { c.Logger = l })
}

// WithPublisher binds pub, an unbound [Publisher] (new(franz.Publisher)),
// to the consumer's client, so that a dead-letter action made before the
// consumer produces through it. New returns an error when pub is nil or
// bound to another client.
func WithPublisher(pub *Publisher) Option {
	return optionFunc(func(c *config) { c.publishers = append(c.publishers, pub) })
}

// Consumer runs a [stream.Processor] over the partitions a franz-go group
// consumer is assigned: one worker per assigned partition, started when
// the partition's committed offset has been fetched and stopped (its
// context cancelled, then waited for) when the partition is revoked or lost
// or the consumer stops. A worker runs on a goroutine while its partition
// has records (workers that wake at once share a few; see the package
// doc); while the partition is idle (nothing fetched and not delivered, no
// retry pending) the worker parks: it gives up its goroutine and its state
// is let go, and it resumes under the same claim (the same ClaimID in the
// stream.Hooks events) when records arrive.
//
// A Consumer is safe for concurrent use. [Consumer.Run] may be called once;
// [Consumer.Close] may be called from anywhere, a handler included. Its
// zero value is not usable: its methods return an error that says to call
// [New].
type Consumer struct {
	e *engine.Consumer
}

// New returns a Consumer that runs proc over the partitions of a franz-go
// group consumer given by [WithClient] or built from [WithKgoOptions]. It
// returns an error when proc is nil, when neither or both of those options
// are given, when an option is out of range, when the client is not set
// up for the adapter, or when the processor dead-letters through a
// [Publisher] bound to no client.
func New(proc *stream.Processor, opts ...Option) (*Consumer, error) {
	cfg := config{Config: engine.DefaultConfig()}
	for i, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("franz: option %d of New is nil", i+1)
		}
		o.apply(&cfg)
	}
	for _, pub := range cfg.publishers {
		var b engine.Publisher // a nil publisher: New refuses it
		if pub != nil {
			b = engine.Publisher{Bind: pub.bind, DeadLetterTopics: pub.deadLetterTopics}
		}
		cfg.Publishers = append(cfg.Publishers, b)
	}
	if proc != nil {
		if pub, topic, ok := proc.DeadLetter(); ok {
			if fp, isFranz := pub.(*Publisher); isFranz && !slices.Contains(cfg.publishers, fp) {
				if !fp.Bound() {
					// It would fail every record given up, for ever.
					return nil, fmt.Errorf("franz: the processor dead-letters to %q through a franz.Publisher bound to no client: give it to New with WithPublisher(pub), or make it with NewPublisher", topic)
				}
				// A publisher on a client of its own (NewPublisher): its
				// topic is checked through that client.
				cfg.DeadLetterCheck = func(ctx context.Context) []health.Problem {
					return kcheck.DeadLetter(ctx, fp.cl.Load(), "franz", topic)
				}
			}
		}
	}
	e, err := engine.New(proc, cfg.Config)
	if err != nil {
		return nil, err
	}
	return &Consumer{e: e}, nil
}

// Client returns the consumer's franz-go client, for producing, admin
// requests or inspection. Do not poll it or commit with it.
func (c *Consumer) Client() *kgo.Client {
	if c == nil || c.e == nil {
		return nil
	}
	return c.e.Client()
}

// Run polls the client and runs a worker per assigned partition until ctx is
// done, [Consumer.Close] is called, the client is closed, or a worker fails.
// On return, every worker has stopped, its batch in flight abandoned without
// a commit, and a client the consumer owns is closed (leaving the group).
// Run returns within a second of its context's end whatever the broker is
// slow to answer (with a commit window, but for the last success commit of
// each partition, which can wait up to the commit timeout behind a
// rebalance; see WithCommitTimeout): a commit in flight is cut short after 250ms, and closing
// an owned client waits at most 400ms for the broker before its requests
// in flight are cancelled (the broker then removes the member at its
// session timeout). An owned client is built with kgo.WithContext for this; a
// kgo.WithContext given in WithKgoOptions replaces it.
//
// Run returns nil after a clean shutdown: ctx done (cancelled or past its
// deadline) or [Consumer.Close] called. Otherwise it returns the error that
// stopped it: the client closed under it, or a worker's failure. It
// returns [stream.ErrClosed] when Close was called before it. It may be called
// once.
func (c *Consumer) Run(ctx context.Context) error {
	if c == nil || c.e == nil {
		return errNotMade
	}
	return c.e.Run(ctx)
}

// Close stops [Consumer.Run] if it runs and waits for it to return, and
// closes a client the consumer owns. A client given with [WithClient] stays
// open. Close is idempotent and may be called from anywhere: called from a
// goroutine Run waits for (a handler, a hook of the processor, the
// WithOnAssigned function), it stops Run and returns without waiting for
// it, and Run closes an owned client when it returns. It returns an error
// only for a Consumer not made by [New].
func (c *Consumer) Close() error {
	if c == nil || c.e == nil {
		return errNotMade
	}
	c.e.Close()
	return nil
}

// Health reports what the consumer knows to be wrong now, or nil: for a
// host's readiness, say. Run checks at start, and again every 2s until the
// checks pass, that the brokers answer (within 5s) and that the topics it
// consumes and the dead-letter topics of its publishers ([WithPublisher],
// as [stream.DeadLetter] names them, and the processor's
// [stream.DeadLetter] through a [Publisher] of [NewPublisher], through its
// client) exist and may be used; it logs each
// problem when it finds it, at Error for brokers that do not answer and at
// Warn for a topic, and at Info when it is gone. While Run runs, a
// partition whose fetches fail is reported too (see the package doc). The
// error joins one error per problem. Health is safe for concurrent use.
func (c *Consumer) Health() error {
	if c == nil || c.e == nil {
		return errNotMade
	}
	return c.e.Health()
}
