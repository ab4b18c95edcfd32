package share

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/redeliver-go/redeliver/adapters/franz/internal/fetcherr"
	"github.com/redeliver-go/redeliver/adapters/franz/internal/kcheck"
	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/internal/health"
	"github.com/redeliver-go/redeliver/internal/leases"
	"github.com/redeliver-go/redeliver/internal/lifecycle"
	"github.com/redeliver-go/redeliver/stream"
)

// DefaultMaxHold is how far ahead a retry may be due for a lane to hold its
// record, unless [WithMaxHold] says otherwise.
const DefaultMaxHold = 5 * time.Minute

// DefaultDrain is how long a stop waits for a lane's records, unless
// [WithDrain] says otherwise: a host's default drain time
// (host.DefaultDrain).
const DefaultDrain = 25 * time.Second

// defaultLock is the acquisition lock duration assumed when the broker does
// not answer the question (Kafka's default, share.record.lock.duration.ms).
const defaultLock = 30 * time.Second

// errNotMade is what the methods of a Consumer not made by New return.
var errNotMade = errors.New("share: the Consumer was not made by share.New: build it with share.New(proc, options...)")

// Option configures a [Consumer].
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	kopts    []kgo.Opt
	lanes    int
	maxHold  time.Duration
	maxBatch int
	drain    time.Duration
	earliest bool
	logger   *slog.Logger
	lock     time.Duration // 0: read from the broker
	limit    int           // 0: read from the broker
	events   func(Event)
	member   string
	onReady  func()
}

// WithKgoOptions gives the options of the franz-go clients the consumer
// builds, one per lane. They must name a share group ([kgo.ShareGroup]) and
// what to consume ([kgo.ConsumeTopics]). Before them come
// kgo.MaxConcurrentFetches(0), so that a lane holding a record in backoff
// has no fetched records waiting whose locks run out (opts may override it,
// at that cost), and kgo.ShareMaxRecords(1000): a lane that fetches only
// while it polls makes up for it with bigger fetches (docs/BENCHMARKS.md,
// "Share groups"); after them comes the consumer's own
// kgo.ShareAckCallback, which replaces one given here.
func WithKgoOptions(opts ...kgo.Opt) Option {
	return optionFunc(func(c *config) { c.kopts = append(c.kopts, opts...) })
}

// WithLanes sets how many members of the share group the consumer runs,
// overriding the default 4. Each lane is one franz-go client with its own
// poll loop; lanes fetch only while they poll, so several of them keep up
// with one client that fetches ahead (docs/BENCHMARKS.md, "Share groups").
// franz-go accepts every record of a poll that has no final
// acknowledgement when the next poll starts, so a lane that holds a record
// in backoff does not poll again until that record is resolved; the other
// lanes go on. A partition the broker assigns to one lane only waits with
// that lane: with more members than partitions (the lanes of every
// consumer in the group), the broker assigns every partition to two
// members or more (KIP-932's simple assignor), and a held record does not
// hold its partition back, up to the partition's window (see the package
// doc).
func WithLanes(n int) Option { return optionFunc(func(c *config) { c.lanes = n }) }

// WithMaxHold sets how far ahead a retry may be due for its record to be
// held (its lock renewed until then), overriding [DefaultMaxHold]. A retry
// due later is released to the broker (AckRelease) at once, which delivers
// the record again at once and counts a delivery; at the broker's last
// delivery it goes to the exhaustion action instead, since the broker would
// archive it.
func WithMaxHold(d time.Duration) Option { return optionFunc(func(c *config) { c.maxHold = d }) }

// WithMaxBatch sets the most records one handler call gets, overriding the
// default 500.
func WithMaxBatch(n int) Option { return optionFunc(func(c *config) { c.maxBatch = n }) }

// WithDrain sets how long a stop (Run's context done, or Close) waits for
// each lane's records, overriding [DefaultDrain]; 0 waits as long as they
// take. While it drains, a lane lets the handler calls running finish,
// their context not done, and delivers the records of its poll that the
// handler did not get yet; it starts no retry (a record held for one is
// released: it failed, and its release counts as that failed delivery)
// and polls no more. After d the calls' context is cancelled and every
// record not settled is released, with a log line that counts them: the
// broker counts one delivery of each for its next member, which takes it
// as a failed one, so under MaxRetries 0 a record the drain bound cut off
// is given up there without a delivery. A host gives its own drain time
// (host.WithDrain) to the consumers it runs. New returns an error for a
// negative d.
func WithDrain(d time.Duration) Option { return optionFunc(func(c *config) { c.drain = d }) }

// WithResetEarliest sets the group's share.auto.offset.reset to earliest
// before the first poll, so that records produced before the group first
// consumed a partition are delivered. A share group starts at the latest
// offset by default. It changes the group's configuration on the broker,
// for every member, and needs the ALTER_CONFIGS permission on the group.
func WithResetEarliest() Option { return optionFunc(func(c *config) { c.earliest = true }) }

// WithLogger sets the logger, overriding the processor's.
func WithLogger(l *slog.Logger) Option { return optionFunc(func(c *config) { c.logger = l }) }

// WithOnReady sets a function Run calls once it has reached the broker: the
// group's settings are read and the members start polling (a share group
// assigns partitions at a member's first poll). A functions host uses it to
// report readiness. fn must be quick. The default is none.
func WithOnReady(fn func()) Option { return optionFunc(func(c *config) { c.onReady = fn }) }

// WithMember names this consumer in [Event]s: a lane's Member is the name
// followed by the lane's number. The default is empty.
func WithMember(name string) Option { return optionFunc(func(c *config) { c.member = name }) }

// WithLockDuration tells the consumer the group's acquisition lock duration
// instead of reading it from the broker at start (the group's
// share.record.lock.duration.ms, else the broker's
// group.share.record.lock.duration.ms, else 30s).
func WithLockDuration(d time.Duration) Option { return optionFunc(func(c *config) { c.lock = d }) }

// WithDeliveryLimit tells the consumer the group's delivery count limit
// instead of reading it from the broker at start (the group's
// share.delivery.count.limit, else the broker's
// group.share.delivery.count.limit).
func WithDeliveryLimit(n int) Option { return optionFunc(func(c *config) { c.limit = n }) }

// Consumer runs a [stream.Processor]'s handler and retry contract over a
// Kafka share group (KIP-932) through franz-go. See the package doc for what
// happens to a record. A Consumer is safe for concurrent use; Run may be
// called once; Close may be called from anywhere, a handler included. Its
// zero value is not usable: its methods return an error that says to call
// [New].
type Consumer struct {
	proc  *stream.Processor
	clock stream.Clock
	cfg   config
	log   *slog.Logger
	group string
	units leases.Driver[stream.Record]

	lock      time.Duration
	limit     atomic.Int64 // the broker's delivery count limit; 0 unknown
	noRenewal atomic.Bool  // the group refuses lock renewals

	life      *lifecycle.Life
	checks    health.Checker
	fetchErrs fetcherr.Tracker // of every lane
}

// New returns a Consumer that runs proc's handler under proc's policy,
// hooks and exhaustion action. It returns an error when proc is nil, when
// the kgo options are missing, name no share group (or a consumer group
// instead), or are refused by kgo as a lane's client would be built from
// them, or when an option is out of range.
func New(proc *stream.Processor, opts ...Option) (*Consumer, error) {
	if proc == nil {
		return nil, errors.New("share: nil processor")
	}
	cfg := config{lanes: 4, maxHold: DefaultMaxHold, maxBatch: 500, drain: DefaultDrain}
	for i, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("share: option %d of New is nil", i+1)
		}
		o.apply(&cfg)
	}
	for i, o := range cfg.kopts {
		if o == nil {
			return nil, fmt.Errorf("share: WithKgoOptions: kgo option %d is nil", i+1)
		}
	}
	switch {
	case len(cfg.kopts) == 0:
		return nil, errors.New("share: no kgo options: give WithKgoOptions with kgo.ShareGroup and kgo.ConsumeTopics")
	case cfg.lanes < 1:
		return nil, fmt.Errorf("share: WithLanes(%d): want 1 or more", cfg.lanes)
	case cfg.maxHold < 0:
		return nil, fmt.Errorf("share: WithMaxHold(%v): want 0 or more", cfg.maxHold)
	case cfg.maxBatch < 1:
		return nil, fmt.Errorf("share: WithMaxBatch(%d): want 1 or more", cfg.maxBatch)
	case cfg.drain < 0:
		return nil, fmt.Errorf("share: WithDrain(%v): want 0 or more", cfg.drain)
	case cfg.lock < 0:
		return nil, fmt.Errorf("share: WithLockDuration(%v): want a positive duration", cfg.lock)
	case cfg.limit < 0:
		return nil, fmt.Errorf("share: WithDeliveryLimit(%d): want a positive count", cfg.limit)
	}
	// Checked as each lane's client is built from them, with no client
	// built: one would join the group.
	if err := checkKgoOpts(cfg.kopts); err != nil {
		return nil, err
	}
	if pub, topic, ok := proc.DeadLetter(); ok {
		if b, isBound := pub.(interface{ Bound() bool }); isBound && !b.Bound() {
			// It would hold every record given up, for ever.
			return nil, fmt.Errorf("share: the processor dead-letters to %q through a publisher bound to no client: make it with franz.NewPublisher(client)", topic)
		}
	}
	c := &Consumer{proc: proc, clock: proc.Clock(), cfg: cfg, log: proc.Logger(), life: lifecycle.New("share", fmt.Errorf("share: consumer %w", stream.ErrClosed))}
	if cfg.logger != nil {
		c.log = cfg.logger
	}
	// Checked here, so that New refuses what the engine's record units
	// cannot apply (an outage budget); Run makes the driver it uses once
	// it knows the group.
	if _, err := c.leases(); err != nil {
		return nil, fmt.Errorf("share: %w", err)
	}
	c.checks.Log = c.log
	c.fetchErrs.Log, c.fetchErrs.Pkg = c.log, "share"
	return c, nil
}

// leases returns the engine's driver of the consumer's records.
func (c *Consumer) leases() (leases.Driver[stream.Record], error) {
	return leases.New(c.proc, leases.Config[stream.Record]{MaxBatch: c.cfg.maxBatch, Drain: c.cfg.drain, Group: c.group, Logger: c.log,
		Limit: func() int { return int(c.limit.Load()) }, Observe: observe})
}

// laneOpts returns the options a lane's client is built with: the
// caller's kopts between the lane's defaults and ack, and then more.
func laneOpts(kopts []kgo.Opt, ack func(*kgo.Client, kgo.ShareAckResults), more ...kgo.Opt) []kgo.Opt {
	opts := append([]kgo.Opt{kgo.MaxConcurrentFetches(0), kgo.ShareMaxRecords(1000)}, kopts...)
	opts = append(opts, kgo.ShareAckCallback(ack))
	return append(opts, more...)
}

// checkKgoOpts checks kopts as a lane's client would be built from them,
// and says in the consumer's words when they name no share group or a
// consumer group instead: kgo's own error is about the share-only options
// the lanes add.
func checkKgoOpts(kopts []kgo.Opt) error {
	ack := func(*kgo.Client, kgo.ShareAckResults) {}
	err := kgo.ValidateOpts(laneOpts(kopts, ack)...)
	if err == nil {
		return nil
	}
	noConsumerGroup, probe := kgo.ConsumerGroup(""), kgo.ShareGroup("probe")
	if kgo.ValidateOpts(laneOpts(kopts, ack, noConsumerGroup, probe)...) == nil {
		// Naming the group was all that was wrong.
		if kgo.ValidateOpts(laneOpts(kopts, ack, probe)...) != nil {
			return errors.New("share: the kgo options name a consumer group (kgo.ConsumerGroup): a share consumer needs kgo.ShareGroup(name) instead")
		}
		return errors.New("share: the kgo options name no share group: add kgo.ShareGroup(name)")
	}
	return fmt.Errorf("share: kgo options: %w", err)
}

// Run consumes until ctx is done or [Consumer.Close] is called. A stop
// drains each lane's poll within the drain time ([WithDrain]): the
// handler calls running finish and the records not handed to the handler
// yet are delivered. What is left then (records held for a retry, and what
// the drain time cut off) is released to the broker, never accepted
// unhandled. Every lane has left the group when Run returns.
//
// Run returns nil after a clean shutdown (ctx done or Close called), as the
// checkpoint adapters' Run does, and otherwise the error that kept it from
// starting or the fetch error that stopped it (see the package doc). It
// returns [stream.ErrClosed] when Close was called before it.
func (c *Consumer) Run(ctx context.Context) error {
	if c == nil || c.life == nil {
		return errNotMade
	}
	return c.life.Run(ctx, c.run)
}

func (c *Consumer) run(ctx context.Context) error {
	lanes := make([]*lane, c.cfg.lanes)
	for i := range lanes {
		l := &lane{c: c, id: i, name: fmt.Sprintf("%s%d", c.cfg.member, i), log: c.log.With("lane", i)}
		cctx, cancel := context.WithCancel(context.Background())
		cl, err := kgo.NewClient(laneOpts(c.cfg.kopts, l.acked, kgo.WithContext(cctx))...)
		if err != nil {
			cancel()
			for _, o := range lanes[:i] {
				o.closeClient()
			}
			return fmt.Errorf("share: kgo options: %w", err)
		}
		l.cl, l.cancel = cl, cancel
		lanes[i] = l
	}
	c.group, _ = lanes[0].cl.OptValue(kgo.ShareGroup).(string)
	units, err := c.leases()
	if err != nil {
		for _, l := range lanes {
			l.closeClient()
		}
		return fmt.Errorf("share: %w", err)
	}
	c.units = units
	for _, l := range lanes {
		l.log = l.log.With("group", c.group)
		l.units = units.Lane(l.log)
	}
	var wrong error
	if c.group == "" {
		wrong = errors.New("share: the kgo options name no share group: add kgo.ShareGroup(name)")
	} else if topics, _ := lanes[0].cl.OptValue(kgo.ConsumeTopics).(map[string]*regexp.Regexp); len(topics) == 0 {
		wrong = errors.New("share: the consumer consumes no topic: add kgo.ConsumeTopics(topic, ...) to WithKgoOptions (Run would wait for records that never come)")
	}
	if wrong != nil {
		for _, l := range lanes {
			l.closeClient()
		}
		return wrong
	}
	cctx, cancel := context.WithCancel(ctx)
	checked := make(chan struct{})
	go func() {
		defer close(checked)
		c.checks.Run(cctx, checkInterval, checkTimeout, func(ctx context.Context) []health.Problem {
			return kcheck.Check(ctx, lanes[0].cl, "share", kcheck.Consumed(lanes[0].cl))
		})
	}()
	defer func() {
		cancel()
		<-checked
	}()
	if err := c.prepare(ctx, lanes[0].cl); err != nil {
		cancel()
		<-checked
		for _, l := range lanes {
			l.closeClient()
		}
		return err
	}
	var wg sync.WaitGroup
	for _, l := range lanes {
		wg.Add(1)
		go lifecycle.Inside(func() {
			defer wg.Done()
			l.run(ctx)
		})
	}
	if c.cfg.onReady != nil {
		c.cfg.onReady()
	}
	wg.Wait()
	return nil // ctx or Close stopped the lanes, or a lane's Fail: Run returns its error
}

// How Run checks at start that the brokers answer and the topics exist:
// each check waits at most checkTimeout, and checks follow every
// checkInterval until one finds nothing wrong.
const (
	checkTimeout  = 5 * time.Second
	checkInterval = 2 * time.Second
)

// Health reports what the consumer knows to be wrong now, or nil: for a
// host's readiness, say. Run checks at start, and again every 2s until the
// checks pass, that the brokers answer (within 5s) and that the topics it
// consumes exist and may be read; it logs each problem when it finds it,
// at Error for brokers that do not answer and at Warn for a topic, and at
// Info when it is gone. While Run runs, a partition whose fetches fail is
// reported too (see the package doc). The error joins one error per
// problem. Health is
// safe for concurrent use; it returns an error for a Consumer not made by
// [New].
func (c *Consumer) Health() error {
	if c == nil || c.life == nil {
		return errNotMade
	}
	return errors.Join(append([]error{c.checks.Err()}, c.fetchErrs.Problems(time.Now())...)...)
}

// Close stops Run and waits for it to return. Close is idempotent and may
// be called from anywhere: called from a goroutine Run waits for (a
// handler, a hook of the processor, an exhaustion action, the WithOnReady
// function), it stops Run and returns without waiting for it. It returns
// an error only for a Consumer not made by [New].
func (c *Consumer) Close() error {
	if c == nil || c.life == nil {
		return errNotMade
	}
	c.life.Close()
	return nil
}

// prepare applies WithResetEarliest and reads the group's lock duration,
// delivery limit and renewal setting, before any lane polls.
func (c *Consumer) prepare(ctx context.Context, cl *kgo.Client) error {
	actx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if c.cfg.earliest {
		if err := c.setGroupConfig(actx, cl, "share.auto.offset.reset", "earliest"); err != nil {
			return fmt.Errorf("share: setting share.auto.offset.reset=earliest on group %s: %w", c.group, err)
		}
		c.log.Info("redeliver: share group reads from the earliest offset", "group", c.group)
	}
	group, broker := c.describe(actx, cl)
	pick := func(groupKey, brokerKey string) (int, bool) {
		v, ok := group[groupKey]
		if !ok {
			v, ok = broker[brokerKey]
		}
		if !ok {
			return 0, false
		}
		n, err := strconv.Atoi(v)
		return n, err == nil && n > 0
	}
	c.lock = c.cfg.lock
	if c.lock == 0 {
		c.lock = defaultLock
		if ms, ok := pick("share.record.lock.duration.ms", "group.share.record.lock.duration.ms"); ok {
			c.lock = time.Duration(ms) * time.Millisecond
		}
	}
	limit := c.cfg.limit
	if limit == 0 {
		limit, _ = pick("share.delivery.count.limit", "group.share.delivery.count.limit")
	}
	c.limit.Store(int64(limit))
	c.log.Debug("redeliver: share group settings", "group", c.group, "lock", c.lock, "delivery_limit", limit)
	if v := group["share.renew.acknowledge.enable"]; v == "false" {
		c.noRenewal.Store(true)
		c.log.Warn("redeliver: the group does not renew acquisition locks (share.renew.acknowledge.enable=false): a retry is held only while the record's lock lasts, a later one releases the record to the broker", "group", c.group, "lock", c.lock)
	}
	p := c.proc.Policy()
	switch {
	case limit == 0:
		c.log.Warn("redeliver: the broker did not tell the share group's delivery count limit; records released to it (lock lost, crash, retry beyond the hold limit) may be archived without an exhaustion action", "group", c.group)
	case p.MaxRetries == checkpoint.Infinite || p.MaxRetries+1 > limit:
		c.log.Warn("redeliver: the policy allows more deliveries than the share group's delivery count limit: retries this consumer holds do not count on the broker, but each release (lock lost, crash, retry beyond the hold limit) does, and the broker archives a record at the limit without an exhaustion action",
			"group", c.group, "retry_count", p.MaxRetries, "delivery_limit", limit)
	}
	return nil
}

// setGroupConfig sets one configuration of the share group.
func (c *Consumer) setGroupConfig(ctx context.Context, cl *kgo.Client, name, value string) error {
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType = kmsg.ConfigResourceTypeGroupConfig
	res.ResourceName = c.group
	cfg := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	cfg.Name = name
	cfg.Op = kmsg.IncrementalAlterConfigOpSet
	cfg.Value = &value
	res.Configs = append(res.Configs, cfg)
	req.Resources = append(req.Resources, res)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return err
	}
	for _, r := range resp.Resources {
		if err := errOf(r.ErrorCode, r.ErrorMessage); err != nil {
			return err
		}
	}
	return nil
}

// describe reads the group's configuration and the broker's share-group
// defaults, as name -> value; what the broker does not answer is missing.
func (c *Consumer) describe(ctx context.Context, cl *kgo.Client) (group, broker map[string]string) {
	group, broker = map[string]string{}, map[string]string{}
	req := kmsg.NewPtrDescribeConfigsRequest()
	res := kmsg.NewDescribeConfigsRequestResource()
	res.ResourceType = kmsg.ConfigResourceTypeGroupConfig
	res.ResourceName = c.group
	req.Resources = append(req.Resources, res)
	if resp, err := req.RequestWith(ctx, cl); err == nil {
		for _, r := range resp.Resources {
			if errOf(r.ErrorCode, r.ErrorMessage) != nil {
				continue
			}
			for _, e := range r.Configs {
				if e.Value != nil {
					group[e.Name] = *e.Value
				}
			}
		}
	} else {
		c.log.Debug("redeliver: describing the share group's configuration failed", "error", err)
	}
	bc, err := kadm.NewClient(cl).DescribeBrokerConfigs(ctx)
	if err != nil {
		c.log.Debug("redeliver: describing the broker's configuration failed", "error", err)
		return group, broker
	}
	for _, r := range bc {
		for _, e := range r.Configs {
			if e.Value != nil {
				broker[e.Key] = *e.Value
			}
		}
	}
	return group, broker
}

func errOf(code int16, msg *string) error {
	if code == 0 {
		return nil
	}
	err := kerrFor(code)
	if msg != nil && *msg != "" {
		return fmt.Errorf("%w: %s", err, *msg)
	}
	return err
}
