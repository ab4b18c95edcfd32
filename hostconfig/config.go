package hostconfig

import (
	"fmt"
	"strings"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
)

// Config is what a host.json says about retries, after the environment
// overrides. It is plain data, filled in by [Load], [Parse] or [Read]; the
// loaders fill in every default, so each field holds the value in force.
// A Config is safe for concurrent reads.
type Config struct {
	// File names the host.json in errors and explanations.
	File string

	// Version is the file's "version": "2.0", or "" when the file has none.
	Version string

	// Host is the host-wide policy: from checkpointRetryPolicy, else from
	// Azure Functions' retry section. Nil when the file sets neither, which
	// means no retries: a failed batch is given up at once.
	Host *RetryPolicy

	// Functions holds the policies of checkpointRetryPolicy.functions by
	// function name, each with the host-wide settings it does not override
	// already filled in.
	Functions map[string]RetryPolicy

	// Redrive is the re-drive section, with every default filled in; nil
	// when the file has none.
	Redrive *Redrive

	// OutageBudget is the outageBudget section, with every default filled
	// in; nil when the file has none, which means no outage budget.
	// [Config.Options] and the other Options methods give each processor
	// a budget of its own when it is on.
	OutageBudget *OutageBudget

	// StatusPage is the statusPage section: the host names a host's status
	// page answers to besides its defaults; nil when the file has none.
	StatusPage *StatusPage

	// Warnings lists what was read but is not in force as written, such
	// as a retry section that checkpointRetryPolicy overrides, a section
	// name that looks like a misspelt one of ours, an environment variable
	// that looks like an override but is not one, a policy for a function
	// whose name is almost a trigger's, or a maxRetryTime that ends the
	// retries before the first one starts. Print or log them: nothing else
	// reports them (see [Load]).
	Warnings []string

	// Triggers holds the triggers section: what starts each function of a
	// host, by function name (see [Trigger]).
	Triggers map[string]Trigger

	keys     []functionKey        // where the file names functions, for CheckFunctions
	settings map[string][]Setting // by function name, "" for the host-wide policy
}

// Function returns the policy in force for the function called name: its
// own from checkpointRetryPolicy.functions (names match case-insensitively),
// else the host-wide one. Nil means no retries.
func (c *Config) Function(name string) *RetryPolicy {
	if p, ok := c.function(name); ok {
		return p
	}
	return c.Host
}

// function returns the function's own policy.
func (c *Config) function(name string) (*RetryPolicy, bool) {
	if p, ok := c.Functions[name]; ok {
		return &p, true
	}
	for n, p := range c.Functions {
		if strings.EqualFold(n, name) {
			return &p, true
		}
	}
	return nil, false
}

// RetryPolicy is one retry policy of a host.json: checkpointRetryPolicy, one
// of its functions, or Azure Functions' retry section.
type RetryPolicy struct {
	// Origin says where the policy was read, e.g.
	// "checkpointRetryPolicy (host.json:4:28)".
	Origin string

	// RetryCount is the number of retries after the first attempt: -1 is
	// infinite ([checkpoint.Infinite]), 0 none.
	RetryCount int

	// Strategy computes the delay before each retry. Its Name is "" only
	// when RetryCount is 0 and the file gives no delay.
	Strategy Strategy

	// MaxDelay caps every delay; 0 means no cap.
	MaxDelay time.Duration

	// MaxRetryTime ends retrying once a retry would start this long after
	// the batch's first failure; 0 means no budget.
	MaxRetryTime time.Duration

	// MaxRecordAge ends retrying once a retry would start when the batch's
	// oldest record is this old; 0 means no limit.
	MaxRecordAge time.Duration

	// IgnoreRetryAfter is set by "honorRetryAfter": false. By default a
	// retry waits at least the retry-after hint an error carries (see
	// [checkpoint.RetryAfter]).
	IgnoreRetryAfter bool

	// OnExhausted is what happens to a batch whose retries are spent.
	OnExhausted Exhaustion
}

// Policy converts p into a [checkpoint.Policy] with the default error
// filter. A nil p converts to the zero Policy, which never retries.
func (p *RetryPolicy) Policy() (checkpoint.Policy, error) {
	if p == nil {
		return checkpoint.Policy{}, nil
	}
	var b checkpoint.Backoff
	if p.Strategy.Name != "" || p.RetryCount != 0 {
		var err error
		if b, err = p.Strategy.Backoff(); err != nil {
			return checkpoint.Policy{}, fmt.Errorf("hostconfig: %s: %w", p.Origin, err)
		}
	}
	cp := checkpoint.Policy{
		MaxRetries:   p.RetryCount,
		Backoff:      b,
		MaxDelay:     p.MaxDelay,
		MaxRetryTime: p.MaxRetryTime,
		MaxRecordAge: p.MaxRecordAge,

		IgnoreRetryAfter: p.IgnoreRetryAfter,
	}
	if err := cp.Validate(); err != nil {
		return checkpoint.Policy{}, fmt.Errorf("hostconfig: %s: %w", p.Origin, err)
	}
	return cp, nil
}

// Strategy is a delay algorithm and its parameters, as host.json's
// strategy names them (see the package documentation for the list). Each
// field holds the parameter of the same name; the fields a strategy does not
// take are zero.
type Strategy struct {
	// Name is the strategy, e.g. "fixed", "exponential", "fullJitter".
	Name string
	// Delay is delay (fixed) or delayInterval (fixedDelay).
	Delay time.Duration
	// InitialDelay is initialDelay, the base of the growing and random
	// strategies.
	InitialDelay time.Duration
	// MinDelay is minDelay or minimumInterval (exponentialBackoff).
	MinDelay time.Duration
	// MaxDelay is the strategy's own maxDelay, or maximumInterval
	// (exponentialBackoff). It is not the policy's maxDelay: fullJitter caps
	// the window it draws from, the Azure IoT C strategies cap the delay
	// before the jitter.
	MaxDelay time.Duration
	// JitterPercent is jitterPercent, 0 to 100.
	JitterPercent float64
	// JitterDown and JitterUp are jitterDown and jitterUp, 0 to 1.
	JitterDown, JitterUp float64
	// FirstFastRetry is firstFastRetry (azureIotJava).
	FirstFastRetry bool
}

// Backoff returns the [checkpoint.Backoff] of the strategy, or an error
// when the name is unknown or a parameter is out of range.
func (s Strategy) Backoff() (checkpoint.Backoff, error) {
	def := lookupStrategy(s.Name)
	if def == nil {
		return nil, fmt.Errorf("unknown strategy %q", s.Name)
	}
	b, err := def.backoff(s)
	if err != nil {
		return nil, fmt.Errorf("strategy %s: %w", def.name, err)
	}
	return b, nil
}

// Exhaustion is what happens to a batch whose retries are spent.
type Exhaustion struct {
	// Action is ActionSkip (the zero value), ActionDeadLetter, ActionStop or
	// ActionPark.
	Action Action
	// Topic is where ActionDeadLetter sends the records; empty for the
	// others.
	Topic string
}

// Action is an exhaustion action, as host.json's onExhausted names it.
// [Config.Options] turns it into the stream package's action.
type Action uint8

const (
	// ActionSkip ("skip") advances the checkpoint past the given-up
	// records: the stream moves on (the Processor's default action).
	ActionSkip Action = iota
	// ActionDeadLetter ("deadLetter") publishes the given-up records to
	// [Exhaustion.Topic], then advances the checkpoint ([stream.DeadLetter]).
	ActionDeadLetter
	// ActionStop ("stop") leaves the checkpoint where it is and stops the
	// partition until it is resumed or skipped ([stream.StopPartition]).
	ActionStop
	// ActionPark ("park") parks the given-up records for a re-drive
	// (package redrive), then advances the checkpoint. Its expiry is the
	// redrive section's.
	ActionPark
)

// String returns the action's host.json spelling.
func (a Action) String() string {
	switch a {
	case ActionSkip:
		return "skip"
	case ActionDeadLetter:
		return "deadLetter"
	case ActionStop:
		return "stop"
	case ActionPark:
		return "park"
	}
	return fmt.Sprintf("Action(%d)", uint8(a))
}
