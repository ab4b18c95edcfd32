package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redeliver-go/redeliver/hostconfig"
	"github.com/redeliver-go/redeliver/internal/kafkatopic"
	"github.com/redeliver-go/redeliver/internal/lifecycle"
	"github.com/redeliver-go/redeliver/redrive"
	"github.com/redeliver-go/redeliver/stream"
)

// DefaultDrain is how long [Host.Run] waits, once it is stopping, for the
// functions' workers to return: within the 20 to 30 seconds Watermill's
// router and Redpanda Connect allow.
const DefaultDrain = 25 * time.Second

// The host's report while it drains: a Warn line 2s after the stop, then
// one every 5s, naming the functions it still waits for.
const (
	drainFirstReport = 2 * time.Second
	drainReportEvery = 5 * time.Second
)

// ErrDrainTimeout is wrapped by the error [Host.Run] returns when a
// function's workers had not returned within the drain time.
var ErrDrainTimeout = errors.New("host: drain time over")

// Option configures a [Host]. The options that also configure one function
// ([WithMiddleware], [WithHooks], [WithProcessorOptions]) are
// [SharedOption]s.
type Option interface{ applyHost(*config) }

// FunctionOption configures one function given to [Host.Register]: a
// trigger such as [Kafka], or a [SharedOption].
type FunctionOption interface{ applyFunction(*function) }

// SharedOption is an option for the whole host (given to [New]) or for one
// function (given to [Host.Register]).
type SharedOption interface {
	Option
	FunctionOption
}

type hostOption func(*config)

func (f hostOption) applyHost(c *config) { f(c) }

type sharedOption struct {
	host func(*config)
	fn   func(*function)
}

// optionError is an option that only reports a mistake in its arguments,
// which New or Register returns.
func optionError(err error) sharedOption {
	return sharedOption{
		host: func(c *config) { c.errs = append(c.errs, err) },
		fn:   func(f *function) { f.errs = append(f.errs, err) },
	}
}

func (o sharedOption) applyHost(c *config)       { o.host(c) }
func (o sharedOption) applyFunction(f *function) { o.fn(f) }

type config struct {
	logger    *slog.Logger
	hooks     []stream.Hooks
	mw        []stream.Middleware
	procOpts  []stream.Option
	publisher stream.Publisher
	brokers   []string
	adapters  []Adapter // WithAdapter
	drain     time.Duration
	httpAddr  string
	listener  net.Listener
	token     string
	allowed   []string // WithAllowedHosts
	open      bool     // WithUnauthenticatedActions
	refresh   time.Duration
	now       func() time.Time
	store     redrive.Store
	parkOpts  []redrive.Option
	noSweep   bool
	errs      []error // mistakes in the options' arguments
}

// WithLogger sets the logger the host, every processor and every consumer
// log to, each function's with a "function" attribute. The default, like a
// nil logger, sends warnings and errors (a function that fails, a record
// given up, an outage) to [slog.Default] and drops the rest.
func WithLogger(l *slog.Logger) Option {
	return hostOption(func(c *config) { c.logger = l })
}

// WithBrokers sets the seed brokers of every Kafka trigger. It is required
// when a function has a Kafka trigger.
func WithBrokers(addrs ...string) Option {
	for i, a := range addrs {
		if strings.TrimSpace(a) == "" {
			return optionError(fmt.Errorf("WithBrokers: address %d of %d is empty", i+1, len(addrs)))
		}
	}
	return hostOption(func(c *config) { c.brokers = append(c.brokers, addrs...) })
}

// WithPublisher sets the publisher of the dead-letter exhaustion action,
// shared by every function whose policy says onExhausted deadLetter, and
// of the re-drive. The default, when the host needs one, is a producer
// that the first [WithAdapter] builds on the brokers of [WithBrokers],
// which the host closes when Run returns.
func WithPublisher(p stream.Publisher) Option {
	return hostOption(func(c *config) { c.publisher = p })
}

// WithDrain sets how long Run waits, once it is stopping, for the workers
// to return; the default is [DefaultDrain]. While it waits, Run logs at
// Warn which functions it waits for and for how long (2s after the stop,
// then every 5s), and the Kafka adapters' consumers get the same drain
// time and name the partitions. Workers see their context
// cancelled at once: a batch in flight is abandoned without a checkpoint
// (its handler's result is not used), and the partition's next owner
// delivers it again.
func WithDrain(d time.Duration) Option {
	return hostOption(func(c *config) { c.drain = d })
}

// WithRedrive gives the host a re-drive store: a function whose policy says
// onExhausted park parks its given-up records there (through [redrive.Park],
// with the expiry of host.json's redrive section, 5 minutes without one;
// opts go to Park and to the scheduler below, such as [redrive.WithClock],
// or redrive.WithHooks(tel.RedriveHooks()) for rdotel's re-drive metrics:
// the scheduler's re-drives and time-outs and Park's re-parks), and the
// status page lists each function's entries (those of records from its
// trigger's topic). Open the store from the redrive section
// (sqlitestore.Open, pgstore.Open) and close it after Run returns. The
// default has no store, and Run refuses to start a function whose policy
// parks. A function whose trigger says "ordering": "key" parks through
// [redrive.ParkByKey] instead: a parked record locks its key, the key's
// later records are parked behind it in order instead of being handled,
// and the scheduler re-drives them one at a time; the store must then be
// a [redrive.KeyLocker] (sqlitestore and pgstore are), or Run refuses to
// start the function.
//
// The host also runs a [redrive.Scheduler] on the store, configured by
// host.json's redrive section (its interval, retry topic, retry timeout and
// the rest), publishing through the host's producer, and completes an
// entry when a function handles its re-driven record
// ([redrive.CompleteOnSuccess] around every function). Several hosts may
// share one PostgreSQL store: their sweeps claim disjoint entries. Give
// [WithoutScheduler] where the re-drive runs elsewhere.
func WithRedrive(store redrive.Store, opts ...redrive.Option) Option {
	if store == nil {
		return optionError(errors.New("WithRedrive: nil store"))
	}
	for i, o := range opts {
		if o == nil {
			return optionError(fmt.Errorf("WithRedrive: option %d of %d is nil", i+1, len(opts)))
		}
	}
	return hostOption(func(c *config) { c.store, c.parkOpts = store, opts })
}

// WithoutScheduler keeps the host from running the re-drive's scheduler on
// the [WithRedrive] store: functions still park there, and something else
// (another process, `redeliver parked requeue`) re-drives the entries.
func WithoutScheduler() Option {
	return hostOption(func(c *config) { c.noSweep = true })
}

// WithMiddleware adds middleware: given to [New], it wraps every function's
// handler; given to [Host.Register], that function's only. Host-wide
// middleware is outermost:
//
//	New(cfg, WithMiddleware(a, b)); Register("f", h, WithMiddleware(c))
//
//	batch -> a -> b -> c -> h
//	result <- a <- b <- c <- h
func WithMiddleware(mw ...stream.Middleware) SharedOption {
	for i, m := range mw {
		if m == nil {
			return optionError(fmt.Errorf("WithMiddleware: middleware %d of %d is nil", i+1, len(mw)))
		}
	}
	return sharedOption{
		host: func(c *config) { c.mw = append(c.mw, mw...) },
		fn:   func(f *function) { f.mw = append(f.mw, mw...) },
	}
}

// WithHooks adds hooks: given to [New], every function's processor calls
// them; given to [Host.Register], that function's only. Hooks that keep
// state per processor, such as those of rdotel's Telemetry.Hooks, belong
// to one function: give them to Register. The host's own status hooks run
// first. Hooks must be fast and safe for concurrent use.
func WithHooks(h stream.Hooks) SharedOption {
	return sharedOption{
		host: func(c *config) { c.hooks = append(c.hooks, h) },
		fn:   func(f *function) { f.hooks = append(f.hooks, h) },
	}
}

// WithProcessorOptions adds [stream.Processor] options, after those the
// host derives from host.json (policy, exhaustion action), so that they
// override them: given to [New], for every function; given to
// [Host.Register], for that one. Hooks given here with [stream.WithHooks]
// are added to the host's, as [WithHooks] adds them: the status page and
// the host's other hooks keep working.
func WithProcessorOptions(opts ...stream.Option) SharedOption {
	for i, o := range opts {
		if o == nil {
			return optionError(fmt.Errorf("WithProcessorOptions: option %d of %d is nil", i+1, len(opts)))
		}
	}
	return sharedOption{
		host: func(c *config) { c.procOpts = append(c.procOpts, opts...) },
		fn:   func(f *function) { f.procOpts = append(f.procOpts, opts...) },
	}
}

// Kafka is a trigger: a Kafka topic read by a consumer group through one of
// the host's adapters ([WithAdapter]). Give it to [Host.Register]. A
// trigger in host.json's triggers section for the same function replaces
// it as a whole, so that an operator can rebind a function without a
// rebuild.
type Kafka struct {
	// Adapter names the [Adapter] that runs the trigger: "franz"
	// (twmb/franz-go, the default when empty), "kafkago"
	// (segmentio/kafka-go), "sarama" (IBM/sarama), "confluent"
	// (confluent-kafka-go), or another given with [WithAdapter].
	Adapter string
	// Topic is the topic the function consumes: a name Kafka accepts
	// (ASCII letters, digits, '.', '_' and '-'), or Run refuses it.
	Topic string
	// Group is the consumer group its consumer joins, or the share group
	// when Share is set.
	Group string
	// Share makes Group a share group (Kafka 4.2 and later, franz adapter
	// only): the records of a partition are shared among consumers and
	// retried one by one (package adapters/franz/share). A share group
	// starts at the latest offset unless its share.auto.offset.reset
	// configuration says earliest.
	Share bool
	// MaxBatch is the most records a batch holds; 0 means the adapter's
	// default (500).
	MaxBatch int
	// Ordering is the ordering of the function's processor
	// ([stream.WithOrdering]): stream.ByPartition (the default),
	// stream.ByKey or stream.ByNone; a host.json trigger's "ordering"
	// ("partition", "key", "none"). A share group has none but
	// ByPartition.
	Ordering stream.Ordering
}

func (k Kafka) applyFunction(f *function) { t := k; f.code = &t; f.source = nil }

// Host runs named functions, each a handler bound to a trigger with its own
// retry policy, and serves their health and status over HTTP.
//
// Register every function, then call [Host.Run] once. Its methods are safe
// for concurrent use.
type Host struct {
	cfg  *hostconfig.Config
	c    config
	log  *slog.Logger
	http http.Handler
	web  *web
	life *lifecycle.Life

	mu      sync.Mutex
	fns     []*function
	started bool

	running  atomic.Bool
	draining atomic.Bool
	sched    *redrive.Scheduler // set by Run with WithRedrive
}

// function is one registered function.
type function struct {
	name     string
	handler  stream.Handler
	code     *Kafka  // the trigger given in code
	source   *Source // or a trigger the host does not build
	mw       []stream.Middleware
	hooks    []stream.Hooks
	procOpts []stream.Option
	errs     []error // mistakes in the options' arguments

	// Set by Run.
	trigger  Kafka
	adapter  Adapter // that runs trigger
	origin   string  // where the trigger comes from: "code" or the file's position
	policy   *hostconfig.RetryPolicy
	proc     *stream.Processor
	run      func(context.Context) error
	close    func()       // closes the consumer when Run does not start
	health   func() error // what the consumer finds wrong now, when it says
	assigned atomic.Bool
	status   *fnStatus
}

// New returns a Host whose policies and triggers come from cfg (nil means
// no host.json: no retries, triggers from code only).
func New(cfg *hostconfig.Config, opts ...Option) (*Host, error) {
	if cfg == nil {
		cfg = &hostconfig.Config{}
	}
	h := &Host{cfg: cfg, c: config{drain: DefaultDrain, refresh: 2 * time.Second, now: time.Now},
		life: lifecycle.New("host", fmt.Errorf("host: %w", stream.ErrClosed))}
	for i, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("host: New: option %d of %d is nil", i+1, len(opts))
		}
		o.applyHost(&h.c)
	}
	if err := errors.Join(h.c.errs...); err != nil {
		return nil, fmt.Errorf("host: %w", err)
	}
	switch {
	case h.c.drain <= 0:
		return nil, fmt.Errorf("host: drain time %v, want more than 0", h.c.drain)
	case h.c.refresh <= 0:
		return nil, fmt.Errorf("host: refresh %v, want more than 0", h.c.refresh)
	case h.c.httpAddr != "" && h.c.listener != nil:
		return nil, errors.New("host: both WithHTTP and WithListener given")
	}
	h.log = h.c.logger
	if h.log == nil {
		h.log = slog.New(warnings{slog.Default().Handler()})
	}
	web, err := newWeb(&h.c, cfg.StatusPage)
	if err != nil {
		return nil, err
	}
	h.web, h.http = web, h.newMux()
	return h, nil
}

// warnings passes the records of Warn level and above to its handler: the
// host's logger when none is given, so that nothing is given up in silence.
type warnings struct{ h slog.Handler }

func (w warnings) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn && w.h.Enabled(ctx, l)
}
func (w warnings) Handle(ctx context.Context, r slog.Record) error { return w.h.Handle(ctx, r) }
func (w warnings) WithAttrs(as []slog.Attr) slog.Handler           { return warnings{w.h.WithAttrs(as)} }
func (w warnings) WithGroup(name string) slog.Handler              { return warnings{w.h.WithGroup(name)} }

// errNotNew is what the methods of a Host that [New] did not make return.
var errNotNew = errors.New("host: this Host was not made by host.New: create it with host.New(cfg, options...)")

// failing answers every request with 500 and err: the HTTP endpoints of a
// Host that New did not make.
func failing(err error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, err.Error(), http.StatusInternalServerError)
	})
}

// usable reports whether h was made by New.
func (h *Host) usable() error {
	if h == nil || h.log == nil {
		return errNotNew
	}
	return nil
}

// Register adds a function called name that runs handler. Its trigger is a
// [Kafka] among opts, or the file's triggers section; one of them is
// required when Run starts. Names are unique, ignoring case, as host.json's
// keys are matched.
func (h *Host) Register(name string, handler stream.Handler, opts ...FunctionOption) error {
	if strings.TrimSpace(name) == "" {
		return errors.New("host: empty function name")
	}
	if err := h.usable(); err != nil {
		return err
	}
	if hf, ok := handler.(stream.HandlerFunc); handler == nil || ok && hf == nil {
		return fmt.Errorf("host: function %q: nil handler", name)
	}
	f := &function{name: name, handler: handler}
	for i, o := range opts {
		if o == nil {
			return fmt.Errorf("host: function %q: option %d of %d is nil", name, i+1, len(opts))
		}
		o.applyFunction(f)
	}
	if err := errors.Join(f.errs...); err != nil {
		return fmt.Errorf("host: function %q: %w", name, err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.started {
		return fmt.Errorf("host: function %q registered after Run", name)
	}
	for _, g := range h.fns {
		if strings.EqualFold(g.name, name) {
			return fmt.Errorf("host: function %q registered twice (names ignore case: %q)", name, g.name)
		}
	}
	h.fns = append(h.fns, f)
	return nil
}

// Run checks every function's binding, starts a consumer per function and
// the HTTP endpoints, and runs until ctx is done or a function's consumer
// fails; then it stops them all. It returns before starting anything when
// a binding is wrong: a function without a trigger, a trigger or policy in
// host.json for a function that is not registered, two functions that
// consume one topic in one consumer group, a trigger the adapters refuse.
//
// While stopping, /readyz answers 503, every worker's context is cancelled
// (batches in flight are abandoned without a checkpoint), and Run waits
// at most the drain time ([WithDrain]) for them; after it, Run returns an
// error wrapping [ErrDrainTimeout] and the workers still running are left
// to end by themselves.
//
// Run returns nil after a clean shutdown, when ctx was done or [Host.Close]
// was called and every worker returned within the drain time, so that
// log.Fatal(h.Run(ctx)) exits 0 on an interrupt. It returns an error for a
// failure: a wrong binding, a function's consumer that failed or stopped
// before the host (the error names the function), the drain time running
// out (in the host or in a function's consumer first), an error a
// function's consumer returned while stopping; and [stream.ErrClosed] when
// Close came before it. It may be called once.
func (h *Host) Run(ctx context.Context) error {
	if err := h.usable(); err != nil {
		return err
	}
	if ctx == nil {
		return errors.New("host: Run: nil context")
	}
	return h.life.Run(ctx, h.run)
}

// Close stops the host as the end of Run's context does (a drain, then
// Run returns) and waits for Run to return, unless it is called from
// within the host (a handler, a hook): then it returns at once, and Run
// returns once the handler does. It may be called more than once and from
// any goroutine; a Run after Close returns [stream.ErrClosed] at once.
func (h *Host) Close() error {
	if err := h.usable(); err != nil {
		return err
	}
	h.life.Close()
	return nil
}

func (h *Host) run(ctx context.Context) error {
	h.mu.Lock()
	h.started = true
	fns := slices.Clone(h.fns)
	h.mu.Unlock()

	closePub, err := h.prepare(fns)
	if err != nil {
		return err
	}
	defer closePub()

	srv, err := h.serve()
	if err != nil {
		for _, f := range fns {
			f.close()
		}
		return err
	}

	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var (
		failMu  sync.Mutex
		failure error // the first failure, which stops the host
	)
	fail := func(err error) {
		failMu.Lock()
		if failure == nil {
			failure = err
		}
		failMu.Unlock()
		cancel(err)
	}
	// A function's consumer that returns an error while the host stops
	// (its own drain time over, a final commit refused) says so with it:
	// the stop was not clean.
	type stopped struct {
		f   *function
		err error
	}
	done := make(chan stopped, len(fns))
	h.running.Store(true)
	for _, f := range fns {
		go func() {
			if f.source != nil && f.origin == "code" {
				f.assigned.Store(true) // running; Source.Ready says more when set
			}
			err := f.callRun(runCtx, h.log)
			if runCtx.Err() == nil {
				// Not asked to stop: a failure, or a consumer that
				// returned early, which leaves the function's records
				// unconsumed.
				if err == nil {
					h.log.Error("redeliver: function's consumer stopped before the host, without an error", "function", f.name)
					err = errStoppedEarly
				} else {
					h.log.Error("redeliver: function failed", "function", f.name, "error", err)
				}
				fail(fmt.Errorf("host: function %s: %w", f.name, err))
				err = nil // the host's failure
			}
			if errors.Is(err, context.Canceled) {
				err = nil // stopped as asked
			}
			done <- stopped{f, err}
		}()
	}
	var swept chan struct{}
	if h.sched != nil {
		swept = make(chan struct{})
		go func() {
			defer close(swept)
			err := h.sched.Run(runCtx)
			if runCtx.Err() == nil {
				if err == nil {
					err = errStoppedEarly
				}
				h.log.Error("redeliver: re-drive scheduler stopped before the host", "error", err)
				fail(fmt.Errorf("host: re-drive scheduler: %w", err))
			}
		}()
	}
	h.log.Info("redeliver: host started", "functions", len(fns))
	<-runCtx.Done()
	failMu.Lock()
	result := failure
	failMu.Unlock()
	why := result
	if why == nil {
		why = context.Cause(ctx)
	}
	h.draining.Store(true)
	h.log.Info("redeliver: host stopping", "cause", why, "drain", h.c.drain)

	timer := time.NewTimer(h.c.drain)
	defer timer.Stop()
	// While it waits, say for which functions, once and then on an
	// interval: a handler that ignores its context holds the stop.
	stopStart := time.Now()
	report := time.NewTimer(drainFirstReport)
	defer report.Stop()
	left := map[*function]bool{}
	for _, f := range fns {
		left[f] = true
	}
	leftNames := func() []string {
		var names []string
		for _, f := range fns {
			if left[f] {
				names = append(names, f.name)
			}
		}
		return names
	}
	for len(left) > 0 {
		select {
		case d := <-done:
			delete(left, d.f)
			switch {
			case d.err == nil || result != nil:
			case errors.Is(d.err, lifecycle.ErrDrainOver):
				// Its drain time is the host's: it ran out there first.
				result = fmt.Errorf("%w: function %s: %w (stopping because: %v)", ErrDrainTimeout, d.f.name, d.err, why)
			default:
				result = fmt.Errorf("host: function %s, stopping: %w (stopping because: %v)", d.f.name, d.err, why)
			}
			continue
		case <-report.C:
			h.log.Warn("redeliver: host stopping: waiting for functions whose consumers have not returned (a handler that ignores its context holds the stop)",
				"functions", strings.Join(leftNames(), ","), "waited", time.Since(stopStart).Round(time.Millisecond), "drain", h.c.drain)
			report.Reset(drainReportEvery)
			continue
		case <-timer.C:
		}
		names := leftNames()
		result = fmt.Errorf("%w: after %v, still running: %s (stopping because: %v)", ErrDrainTimeout, h.c.drain, strings.Join(names, ", "), why)
		h.log.Error("redeliver: host drain time over", "still_running", names)
		break
	}
	if swept != nil {
		<-swept // a sweep in progress finishes its claim and stops
	}
	h.running.Store(false)
	if srv != nil {
		sctx, scancel := context.WithTimeout(context.Background(), time.Second)
		_ = srv.Shutdown(sctx)
		scancel()
	}
	if result != nil {
		h.log.Error("redeliver: host stopped", "error", result)
	} else {
		h.log.Info("redeliver: host stopped", "cause", why)
	}
	return result
}

// errStoppedEarly is why a function stops the host when its consumer's run
// function returned nil before the host asked it to stop.
var errStoppedEarly = errors.New("its consumer returned before the host stopped, without an error " +
	"(a consumer's run function, a host.Source's included, must block until its context is done)")

// prepare resolves every function's trigger and policy and builds its
// processor and consumer. It returns a function that closes the
// dead-letter publisher the host built, if it built one.
func (h *Host) prepare(fns []*function) (func(), error) {
	noop := func() {}
	if len(fns) == 0 {
		return noop, errors.New("host: no function registered")
	}
	names := make([]string, len(fns))
	for i, f := range fns {
		names[i] = f.name
	}
	if err := h.cfg.CheckFunctions(names); err != nil {
		return noop, fmt.Errorf("host: %w", err)
	}
	var problems []string
	needPub := false
	var bound []*function
	for _, f := range fns {
		if err := h.bind(f); err != nil {
			problems = append(problems, err.Error())
			continue
		}
		bound = append(bound, f)
		if err := h.bindAdapter(f); err != nil {
			problems = append(problems, err.Error())
		}
		if f.policy != nil && f.policy.OnExhausted.Action == hostconfig.ActionDeadLetter {
			needPub = true
		}
		if f.policy != nil && f.policy.OnExhausted.Action == hostconfig.ActionPark && h.c.store == nil {
			problems = append(problems, fmt.Sprintf("host: function %s: the policy of %s says onExhausted park, which needs a re-drive store: "+
				"give host.WithRedrive(store), with the store opened from host.json's redrive section (sqlitestore.Open or pgstore.Open)", f.name, f.policy.Origin))
		}
	}
	problems = append(problems, sharedGroups(bound)...)
	if len(problems) > 0 {
		return noop, errors.New(strings.Join(problems, "\n"))
	}
	kafkaFns := false
	for _, f := range fns {
		kafkaFns = kafkaFns || f.source == nil || f.origin != "code"
	}
	if len(h.c.brokers) == 0 && kafkaFns {
		return noop, errors.New("host: no brokers for the Kafka triggers: give host.WithBrokers")
	}
	sweep := h.c.store != nil && !h.c.noSweep
	needPub = needPub || sweep
	pub, closePub := h.c.publisher, noop
	if pub == nil && needPub {
		var err error
		if pub, closePub, err = h.publisher(); err != nil {
			return noop, err
		}
	}
	if sweep {
		opts := append(schedulerOptions(h.cfg.Redrive), h.c.parkOpts...)
		opts = append(opts, redrive.WithLogger(h.log.With("component", "redrive")))
		sch, err := redrive.NewScheduler(h.c.store, pub, opts...)
		if err != nil {
			closePub()
			return noop, fmt.Errorf("host: re-drive scheduler: %w", err)
		}
		h.sched = sch
	}
	for i, f := range fns {
		if err := h.build(f, pub); err != nil {
			for _, g := range fns[:i] {
				g.close()
			}
			closePub()
			return noop, err
		}
	}
	return closePub, nil
}

// sharedGroups reports the functions that consume the same topic in the
// same group: each would get its own consumer in that one group, so the
// group would split the topic's records between them.
func sharedGroups(fns []*function) []string {
	type topicGroup struct{ topic, group string }
	first := map[topicGroup]*function{}
	var problems []string
	for _, f := range fns {
		if f.trigger.Group == "" { // a Source
			continue
		}
		k := topicGroup{f.trigger.Topic, f.trigger.Group}
		g := first[k]
		if g == nil {
			first[k] = f
			continue
		}
		problems = append(problems, fmt.Sprintf("host: functions %s (trigger from %s) and %s (trigger from %s) both consume topic %q in group %q: "+
			"the group would split the topic's records between them, each function getting a part; give each function a group of its own",
			g.name, g.origin, f.name, f.origin, k.topic, k.group))
	}
	return problems
}

// bind resolves f's trigger (the file's, else the code's) and policy.
func (h *Host) bind(f *function) error {
	if t, ok := h.cfg.Trigger(f.name); ok {
		if t.Type != "kafka" {
			return fmt.Errorf("host: function %s: %s: trigger type %q is not supported", f.name, t.Origin, t.Type)
		}
		f.trigger = Kafka{Adapter: t.Adapter, Topic: t.Topic, Group: t.ConsumerGroup, MaxBatch: t.MaxBatchSize}
		if !slices.ContainsFunc(t.Settings, func(s hostconfig.Setting) bool { return s.Field == "adapter" }) {
			f.trigger.Adapter = "" // the default, which the file does not name
		}
		if t.ShareGroup != "" {
			f.trigger.Group, f.trigger.Share = t.ShareGroup, true
		}
		o, err := stream.ParseOrdering(t.Ordering)
		if err != nil {
			return fmt.Errorf("host: function %s: %s: %w", f.name, t.Origin, err)
		}
		f.trigger.Ordering = o
		f.origin = t.Origin
	} else if f.code != nil {
		f.trigger = *f.code
		f.origin = "code"
	} else if f.source != nil {
		if err := f.source.check(); err != nil {
			return fmt.Errorf("host: function %s: %w", f.name, err)
		}
		f.trigger = Kafka{Topic: f.source.Topic}
		f.origin = "code"
		f.policy = h.cfg.Function(f.name)
		return nil
	} else {
		where := h.cfg.File
		if where == "" {
			where = "host.json"
		}
		return fmt.Errorf(`host: function %s has no trigger: give host.Kafka{...} to Register, or add "triggers": {%q: {"type": "kafka", "topic": ..., "consumerGroup": ...}} to %s`, f.name, f.name, where)
	}
	t := &f.trigger
	switch {
	case strings.TrimSpace(t.Topic) == "":
		return fmt.Errorf("host: function %s (trigger from %s): no topic", f.name, f.origin)
	case kafkatopic.Problem(t.Topic) != "":
		// A name Kafka refuses: the consumer would wait for it for ever.
		return fmt.Errorf("host: function %s (trigger from %s): topic %s", f.name, f.origin, kafkatopic.Problem(t.Topic))
	case strings.TrimSpace(t.Group) == "":
		return fmt.Errorf("host: function %s (trigger from %s): no consumer group", f.name, f.origin)
	case t.MaxBatch < 0:
		return fmt.Errorf("host: function %s (trigger from %s): max batch %d, want 0 (the adapter's default) or more", f.name, f.origin, t.MaxBatch)
	case t.Ordering > stream.ByNone:
		return fmt.Errorf("host: function %s (trigger from %s): ordering %v, want stream.ByPartition, ByKey or ByNone", f.name, f.origin, t.Ordering)
	case t.Share && t.Ordering != stream.ByPartition:
		return fmt.Errorf("host: function %s (trigger from %s): a share group acknowledges records one by one and keeps no order: ordering %s applies to a consumer group", f.name, f.origin, t.Ordering)
	}
	f.policy = h.cfg.Function(f.name)
	return nil
}

// build makes f's processor and consumer.
func (h *Host) build(f *function, pub stream.Publisher) error {
	// The function's own policy, or the host-wide one when the file gives
	// it none (CheckFunctions has already refused policies of functions the
	// host does not run).
	var (
		opts []stream.Option
		err  error
	)
	sel := []hostconfig.Option{hostconfig.Function(f.name)}
	switch {
	case h.c.store != nil && f.trigger.Ordering == stream.ByKey && !f.trigger.Share &&
		f.policy != nil && f.policy.OnExhausted.Action == hostconfig.ActionPark:
		// Key ordering with park: a parked record locks its key, whose
		// later records are parked behind it (redrive.ParkByKey, whose
		// option brings its park).
		pk, perr := redrive.ParkByKey(h.c.store, redriveExpiry(h.cfg.Redrive), h.c.parkOpts...)
		if perr != nil {
			return fmt.Errorf("host: function %s: ordering key with onExhausted park: %w", f.name, perr)
		}
		sel = append(sel, hostconfig.ParkOption(pk))
	case h.c.store != nil:
		park, perr := redrive.Park(h.c.store, redriveExpiry(h.cfg.Redrive), h.c.parkOpts...)
		if perr != nil {
			return fmt.Errorf("host: function %s: %w", f.name, perr)
		}
		sel = append(sel, hostconfig.Park(park))
	}
	opts, err = h.cfg.Options(pub, sel...)
	if err != nil {
		return fmt.Errorf("host: function %s: %w", f.name, err)
	}
	if o := f.trigger.Ordering; o != stream.ByPartition && !f.trigger.Share {
		opts = append(opts, stream.WithOrdering(o))
	}
	log := h.log.With("function", f.name)
	status := newFnStatus(f, h.c.now)
	hooks := append([]stream.Hooks{status.hooks()}, h.c.hooks...)
	hooks = append(hooks, f.hooks...)
	opts = append(opts, stream.WithLogger(log), stream.WithHooks(stream.MergeHooks(hooks...)))
	opts = append(opts, h.c.procOpts...)
	opts = append(opts, f.procOpts...)
	var mw []stream.Middleware
	if h.c.store != nil {
		// Outermost: a re-driven record's entry is done once the whole
		// chain handled it.
		mw = append(mw, redrive.CompleteOnSuccess(h.c.store, h.c.parkOpts...))
	}
	mw = append(mw, h.c.mw...)
	mw = append(mw, f.mw...)
	proc, err := stream.NewProcessor(stream.Chain(f.handler, mw...), opts...)
	if err != nil {
		return fmt.Errorf("host: function %s: %w", f.name, err)
	}
	status.proc = proc
	h.mu.Lock() // Status, Resume and Skip read them
	f.proc, f.status = proc, status
	h.mu.Unlock()
	switch {
	case f.source != nil && f.origin == "code":
		f.run, err = f.source.newRun(proc)
		if err == nil && f.run == nil {
			err = errors.New("host.Source's New returned no run function")
		}
		f.close = func() {}
	default:
		f.run, err = h.consumer(f, proc, log)
	}
	if err != nil {
		return fmt.Errorf("host: function %s: %w", f.name, err)
	}
	return nil
}

// ready reports whether f's consumer is ready: joined and assigned for a
// Kafka trigger, as its Source says for one, running otherwise.
func (f *function) ready() bool {
	if f.source != nil && f.origin == "code" && f.source.Ready != nil {
		return f.source.Ready()
	}
	return f.assigned.Load()
}

// Ready reports whether Run runs, is not stopping, and every function's
// consumer has joined its group and received its assignment, and finds
// nothing wrong (a consumer with a Health method, as the Kafka adapters'
// are, that reports brokers that do not answer, a topic that is not
// there, fetches that fail); when not, it says why, function by function.
func (h *Host) Ready() (bool, string) { return h.readiness(true) }

// readiness is Ready; without detail, a function whose consumer reports a
// problem is named without the problem (its topics, brokers and error
// texts), for /readyz by a name the host does not answer to.
func (h *Host) readiness(detail bool) (bool, string) {
	if err := h.usable(); err != nil {
		return false, err.Error()
	}
	switch {
	case h.draining.Load():
		return false, "stopping"
	case !h.running.Load():
		return false, "not running"
	}
	h.mu.Lock()
	fns := slices.Clone(h.fns)
	h.mu.Unlock()
	var (
		wrong   []string
		waiting []string
	)
	for _, f := range fns {
		if f.health != nil {
			if err := f.health(); err != nil {
				why := "its consumer reports a problem (the status page says which)"
				if detail {
					why = strings.ReplaceAll(err.Error(), "\n", "; ")
				}
				wrong = append(wrong, f.name+": "+why)
				continue
			}
		}
		if !f.ready() {
			waiting = append(waiting, f.name)
		}
	}
	if len(waiting) > 0 {
		wrong = append(wrong, "waiting for the group assignment of "+strings.Join(waiting, ", "))
	}
	if len(wrong) > 0 {
		return false, strings.Join(wrong, "; ")
	}
	return true, "ready"
}

// lookup returns the function called name, ignoring case, once Run has
// built it.
func (h *Host) lookup(name string) *function {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, f := range h.fns {
		if strings.EqualFold(f.name, name) && f.proc != nil {
			return f
		}
	}
	return nil
}

// ErrUnknownFunction is returned by [Host.Resume] and [Host.Skip] for a
// function the host does not run.
var ErrUnknownFunction = errors.New("host: no such function")

// Resume releases a stopped partition of a function: its batch is
// delivered again with a fresh retry count ([stream.Processor.Resume]). It
// waits for the partition's worker to take the command until ctx is done;
// then it returns an error that wraps ctx's error and says that the
// partition is still stopped.
func (h *Host) Resume(ctx context.Context, function, topic string, partition int32) error {
	if err := h.usable(); err != nil {
		return err
	}
	f := h.lookup(function)
	if f == nil {
		return fmt.Errorf("%w: %q", ErrUnknownFunction, function)
	}
	if err := f.proc.Resume(ctx, topic, partition); err != nil {
		return err
	}
	f.status.released(topic, partition, "resumed", -1)
	h.log.Info("redeliver: stopped partition resumed by an operator", "function", f.name, "topic", topic, "partition", partition)
	return nil
}

// Skip releases a stopped partition of a function past its batch
// ([stream.Processor.Skip]). It waits until the checkpoint has moved past
// the batch or ctx is done; then it returns an error that wraps ctx's
// error and says what state the partition is in: still stopped (nothing
// was done), or no longer stopped, its checkpoint past the batch being
// written (the status page shows it as given up until it is).
func (h *Host) Skip(ctx context.Context, function, topic string, partition int32) error {
	if err := h.usable(); err != nil {
		return err
	}
	f := h.lookup(function)
	if f == nil {
		return fmt.Errorf("%w: %q", ErrUnknownFunction, function)
	}
	sp, _ := f.stopped(topic, partition)
	if err := f.proc.Skip(ctx, topic, partition); err != nil {
		if _, still := f.stopped(topic, partition); ctx != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) && !still {
			// The worker took the skip; its checkpoint is being written.
			f.status.released(topic, partition, "skipped", sp.LastOffset)
			h.log.Info("redeliver: stopped partition skipped by an operator, its checkpoint not written yet", "function", f.name,
				"topic", topic, "partition", partition, "error", err)
		}
		return err
	}
	f.status.released(topic, partition, "skipped", sp.LastOffset)
	h.log.Info("redeliver: stopped partition skipped by an operator", "function", f.name, "topic", topic, "partition", partition)
	return nil
}

// ResumeRecord releases a record of a function held by StopPartition in
// share mode ([stream.Processor.ResumeRecord]): it is delivered again with
// a fresh retry count. With several records of one partition stopped,
// [Host.Resume] names them and this reaches each one. It waits as Resume
// does.
func (h *Host) ResumeRecord(ctx context.Context, function, topic string, partition int32, offset int64) error {
	return h.releaseRecord(ctx, function, topic, partition, offset, true)
}

// SkipRecord releases a record of a function held by StopPartition in
// share mode past its exhaustion action ([stream.Processor.SkipRecord]):
// it is settled as after an action that succeeded. With several records
// of one partition stopped, [Host.Skip] names them and this reaches each
// one. It waits as Skip does.
func (h *Host) SkipRecord(ctx context.Context, function, topic string, partition int32, offset int64) error {
	return h.releaseRecord(ctx, function, topic, partition, offset, false)
}

func (h *Host) releaseRecord(ctx context.Context, function, topic string, partition int32, offset int64, resume bool) error {
	if err := h.usable(); err != nil {
		return err
	}
	f := h.lookup(function)
	if f == nil {
		return fmt.Errorf("%w: %q", ErrUnknownFunction, function)
	}
	do, how := f.proc.SkipRecord, "skipped"
	if resume {
		do, how = f.proc.ResumeRecord, "resumed"
	}
	if err := do(ctx, topic, partition, offset); err != nil {
		return err
	}
	_, still := f.stopped(topic, partition) // other records of the partition
	f.status.recordReleased(topic, partition, fmt.Sprintf("the record at offset %d %s by an operator", offset, how), !still)
	h.log.Info("redeliver: stopped record "+how+" by an operator", "function", f.name, "topic", topic, "partition", partition, "offset", offset)
	return nil
}

// stopped returns the partition as f's processor holds it stopped, and
// whether it does.
func (f *function) stopped(topic string, partition int32) (stream.StoppedPartition, bool) {
	for _, sp := range f.proc.Stopped() {
		if sp.Topic == topic && sp.Partition == partition {
			return sp, true
		}
	}
	return stream.StoppedPartition{}, false
}

// serve starts the HTTP server, when one is configured.
func (h *Host) serve() (*http.Server, error) {
	ln := h.c.listener
	if ln == nil {
		if h.c.httpAddr == "" {
			return nil, nil
		}
		addr := h.c.httpAddr
		if host, port, err := net.SplitHostPort(addr); err == nil && host == "" {
			addr = net.JoinHostPort("127.0.0.1", port)
		}
		var err error
		if ln, err = net.Listen("tcp", addr); err != nil {
			return nil, fmt.Errorf("host: http: %w", err)
		}
	}
	if h.c.token == "" && !h.c.open && !isLoopback(ln.Addr()) {
		ln.Close()
		return nil, fmt.Errorf("host: http: %s is beyond the loopback interface and the host has no token, so anyone who reaches it could resume and skip stopped partitions: "+
			"give host.WithToken (%d bytes or more), or listen on 127.0.0.1, or give host.WithUnauthenticatedActions() to serve the actions without a token", ln.Addr(), MinTokenLen)
	}
	srv := &http.Server{Handler: h.http, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			h.log.Error("redeliver: http server stopped", "error", err)
		}
	}()
	h.log.Info("redeliver: http endpoints", "addr", "http://"+ln.Addr().String()+"/")
	return srv, nil
}

// schedulerOptions returns the options a host.json redrive section sets:
// interval, retry timeout, maximum re-drives, retry and reply topics, error
// code and batch size. A nil section gives none (the defaults).
func schedulerOptions(r *hostconfig.Redrive) []redrive.Option {
	if r == nil {
		return nil
	}
	return []redrive.Option{
		redrive.WithInterval(r.Interval), redrive.WithRetryTimeout(r.RetryTimeout), redrive.WithMaxRedrives(r.MaxRedrives),
		redrive.WithRetryTopic(r.RetryTopic), redrive.WithReplyTopic(r.ReplyTopic), redrive.WithErrorCode(r.ErrorCode), redrive.WithBatchSize(r.BatchSize),
	}
}

// redriveExpiry is how long a parked record waits before its first
// re-drive: the redrive section's expiry, or the scheduler's default
// interval without a section.
func redriveExpiry(r *hostconfig.Redrive) time.Duration {
	if r == nil {
		return redrive.DefaultInterval
	}
	return r.Expiry
}
