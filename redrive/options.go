package redrive

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/redeliver-go/redeliver/stream"
)

// Option configures a [Scheduler], the [Park] action or the
// [CompleteOnSuccess] middleware; each takes the options that concern it and
// ignores the others.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	interval     time.Duration
	retryTimeout time.Duration
	maxRedrives  int
	retryTopic   string
	replyTopic   string
	errorCode    string
	batchSize    int
	clock        stream.Clock
	logger       *slog.Logger
	hooks        []Hooks
}

// The defaults, from the time-based retry processor design: a sweep every 5 minutes, and 20 minutes from
// an entry's creation before it times out.
const (
	DefaultInterval     = 5 * time.Minute
	DefaultRetryTimeout = 20 * time.Minute
	DefaultBatchSize    = 500
	DefaultErrorCode    = "REDRIVE_TIMEOUT"
)

// newConfig applies opts, given to the function called by (for errors),
// to the defaults. A nil option is an error.
func newConfig(by string, opts []Option) (config, error) {
	c := config{
		interval:     DefaultInterval,
		retryTimeout: DefaultRetryTimeout,
		errorCode:    DefaultErrorCode,
		batchSize:    DefaultBatchSize,
	}
	for i, o := range opts {
		if o == nil {
			return c, fmt.Errorf("redrive: %s: option %d of %d is nil", by, i+1, len(opts))
		}
		o.apply(&c)
	}
	if c.clock == nil {
		c.clock = systemClock{}
	}
	if c.logger == nil {
		c.logger = slog.New(warnings{slog.Default().Handler()})
	}
	return c, nil
}

// warnings passes the records of Warn level and above to h: what a
// scheduler or an action says when no logger is given, so that a failure
// or a give-up is never invisible and a sweep that goes well says nothing.
type warnings struct{ h slog.Handler }

func (w warnings) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn && w.h.Enabled(ctx, l)
}
func (w warnings) Handle(ctx context.Context, r slog.Record) error { return w.h.Handle(ctx, r) }
func (w warnings) WithAttrs(as []slog.Attr) slog.Handler           { return warnings{w.h.WithAttrs(as)} }
func (w warnings) WithGroup(name string) slog.Handler              { return warnings{w.h.WithGroup(name)} }

// Resolution is the precision of the times stores keep: a microsecond.
// Expiries, retry timeouts and intervals are rounded up to it, so that an
// entry changed by a sweep is never due again within the same sweep.
const Resolution = time.Microsecond

// ceil rounds d up to a whole number of [Resolution].
func ceil(d time.Duration) time.Duration {
	if r := d % Resolution; r > 0 {
		d += Resolution - r
	}
	return d
}

// WithInterval sets the time between the starts of two sweeps. The default
// is [DefaultInterval] (5 minutes). A sweep that takes longer than the
// interval is followed by the next one at once. It is rounded up to a
// whole microsecond ([Resolution]).
func WithInterval(d time.Duration) Option {
	return optionFunc(func(c *config) { c.interval = d })
}

// WithRetryTimeout sets how long after its creation a retrying entry is
// timed out. The default is [DefaultRetryTimeout] (20 minutes). It is
// rounded up to a whole microsecond ([Resolution]).
func WithRetryTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.retryTimeout = d })
}

// WithMaxRedrives sets the number of re-drives after which a retrying entry
// that is due again is timed out instead. The default, 0, sets no limit: the
// retry timeout alone ends the re-drives.
func WithMaxRedrives(n int) Option {
	return optionFunc(func(c *config) { c.maxRedrives = n })
}

// WithRetryTopic sets the topic re-driven records are published to. The
// default, "", publishes each back to its own topic.
func WithRetryTopic(topic string) Option {
	return optionFunc(func(c *config) { c.retryTopic = topic })
}

// WithReplyTopic sets the topic a timed-out entry is reported to: its
// original record with [HeaderErrorCode] and the reason. The default, "",
// reports through the TimedOut hook and the log only.
func WithReplyTopic(topic string) Option {
	return optionFunc(func(c *config) { c.replyTopic = topic })
}

// WithErrorCode sets the value of [HeaderErrorCode] on reply records. The
// default is [DefaultErrorCode].
func WithErrorCode(code string) Option {
	return optionFunc(func(c *config) { c.errorCode = code })
}

// WithBatchSize sets how many entries a sweep claims, publishes and marks
// at a time. The default is [DefaultBatchSize].
func WithBatchSize(n int) Option {
	return optionFunc(func(c *config) { c.batchSize = n })
}

// WithClock sets the time source. The default is the system clock; tests
// inject streamtest.Clock.
func WithClock(clk stream.Clock) Option {
	return optionFunc(func(c *config) { c.clock = clk })
}

// WithLogger sets the logger. The default, like a nil logger, sends
// warnings and errors (a failed sweep, a record that could not be
// re-published, an entry timed out) to [slog.Default] and nothing else.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) { c.logger = l })
}

// WithHooks adds hooks: several WithHooks add up, and each event calls
// the hooks given for it in the order given. The default has none.
func WithHooks(h Hooks) Option {
	return optionFunc(func(c *config) { c.hooks = append(c.hooks, h) })
}

// each calls fn for every Hooks given.
func (c *config) each(fn func(Hooks)) {
	for _, h := range c.hooks {
		fn(h)
	}
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) NewTimer(d time.Duration) (<-chan time.Time, func() bool) {
	t := time.NewTimer(d)
	return t.C, t.Stop
}

// Hooks are called by a [Scheduler] as it sweeps, and Reparked by the
// [Park] action. Every field is optional. Hooks run on the caller's
// goroutine: they must be fast, and safe for concurrent use when several
// schedulers or consumers share them.
type Hooks struct {
	// Redriven is called for each entry re-published and marked retrying,
	// after the mark.
	Redriven func(EntryEvent)
	// TimedOut is called for each entry timed out, after it was reported
	// to the reply topic (when there is one) and marked: the design's report
	// back to the device, as a callback.
	TimedOut func(EntryEvent)
	// Failed is called for each entry that could not be re-published or
	// reported (Err says why); it is tried again on a later sweep.
	Failed func(EntryEvent)
	// StoreFailed is called when a sweep fails on a store error; nothing
	// is lost and the next sweep tries again.
	StoreFailed func(SweepEvent)
	// Swept is called at the end of every sweep.
	Swept func(SweepEvent)
	// Reparked is called by the [Park] action when a re-driven record
	// failed again and was handed back to its entry (see [Store.Repark]),
	// once per re-drive: the count of re-parks, a metric worth watching.
	// Entry is the entry as it is now.
	Reparked func(EntryEvent)
}

// EntryEvent reports what a sweep did with one entry.
type EntryEvent struct {
	// Entry is the entry as it is now in the store (for Failed, as it will
	// be once the failure is recorded).
	Entry Entry
	// Err is the failure for Failed, else nil.
	Err error
}

// SweepEvent reports one sweep.
type SweepEvent struct {
	// At is the time the sweep compared due times with.
	At time.Time
	// Claimed counts the due entries claimed; Redriven, TimedOut and Failed
	// what became of them; Lost counts changes not applied because the
	// entry changed meanwhile (completed by a consumer).
	Claimed, Redriven, TimedOut, Failed, Lost int
	// Duration is how long the sweep took, by the scheduler's clock.
	Duration time.Duration
	// Err is the store error that ended the sweep early, or nil.
	Err error
}
