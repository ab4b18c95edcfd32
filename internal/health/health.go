// Package health runs the start checks of redeliver's consumers (do the
// brokers answer, do the topics exist) and keeps what they found, for the
// consumers' Health methods and, through them, a host's readiness.
package health

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"
)

// Problem is one thing a check found wrong.
type Problem struct {
	// Subject is what it is about: "brokers", or a topic's name; a
	// problem is logged once per subject and error text.
	Subject string
	Err     error
	Level   slog.Level // of its log line
	Msg     string     // the log line's message
	// Stops says that nothing is consumed while the problem lasts (the
	// brokers do not answer, a consumed topic is not there): a Checker
	// with EndAfter ends the run with it once it has lasted that long.
	Stops bool
}

// RepeatEvery is how often a problem that lasts is logged again, with how
// long it has lasted. A variable so that the adapters' tests can shorten
// it.
var RepeatEvery = 30 * time.Second

// DefaultEndAfter is how long a problem that stops all consumption may last
// before a consumer's Run ends with it, unless set otherwise.
const DefaultEndAfter = time.Minute

// Checker runs checks and keeps the problems the last one found. Its zero
// value is ready to use; set Log first. It is safe for concurrent use.
type Checker struct {
	Log *slog.Logger
	// EndAfter, when above 0, is how long a problem that Stops may last:
	// then Run calls End with its error and returns.
	EndAfter time.Duration
	End      func(error)

	mu     sync.Mutex
	found  map[string]Problem   // by subject
	since  map[string]time.Time // when each problem was first found, while it lasts
	logged map[string]time.Time // when each was last logged
}

// Run calls check at once and then every interval while it finds
// problems, until it finds none or ctx ends; each check gets at most
// timeout. A problem is logged when it is first found (or its error
// changes), at its Level, and at Info once a check no longer finds it.
func (c *Checker) Run(ctx context.Context, interval, timeout time.Duration, check func(ctx context.Context) []Problem) {
	for {
		cctx, cancel := context.WithTimeout(ctx, timeout)
		ps := check(cctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		c.set(ps)
		if len(ps) == 0 {
			return
		}
		if err := c.lasting(time.Now()); err != nil {
			c.Log.Error("redeliver: a problem that stops all consumption has lasted too long: the consumer stops", "error", err)
			c.End(err)
			return
		}
		t := time.NewTimer(interval)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		}
	}
}

// lasting returns the error to end the run with: that of the first
// problem, by subject, that Stops and has lasted EndAfter; nil for none.
func (c *Checker) lasting(now time.Time) error {
	if c.EndAfter <= 0 || c.End == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	subjects := make([]string, 0, len(c.found))
	for s := range c.found {
		subjects = append(subjects, s)
	}
	slices.Sort(subjects)
	for _, s := range subjects {
		if p := c.found[s]; p.Stops && now.Sub(c.since[s]) >= c.EndAfter {
			return fmt.Errorf("%w (for %v, the limit: nothing is consumed meanwhile)", p.Err, now.Sub(c.since[s]).Round(time.Second))
		}
	}
	return nil
}

// set makes ps the problems found, logging what changed, and again every
// RepeatEvery what lasts.
func (c *Checker) set(ps []Problem) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := time.Now()
	if c.since == nil {
		c.since, c.logged = map[string]time.Time{}, map[string]time.Time{}
	}
	now := make(map[string]Problem, len(ps))
	for _, p := range ps {
		now[p.Subject] = p
		old, ok := c.found[p.Subject]
		switch {
		case !ok || old.Err.Error() != p.Err.Error():
			if !ok {
				c.since[p.Subject] = t
			}
			c.logged[p.Subject] = t
			c.Log.Log(context.Background(), p.Level, p.Msg, "subject", p.Subject, "error", p.Err)
		case t.Sub(c.logged[p.Subject]) >= RepeatEvery:
			c.logged[p.Subject] = t
			c.Log.Log(context.Background(), p.Level, p.Msg+" (still)", "subject", p.Subject, "error", p.Err,
				"lasted", t.Sub(c.since[p.Subject]).Round(time.Second))
		}
	}
	for s, old := range c.found {
		if _, ok := now[s]; !ok {
			c.Log.Info("redeliver: start check passes now", "subject", s, "error_was", old.Err)
			delete(c.since, s)
			delete(c.logged, s)
		}
	}
	c.found = now
}

// Err returns the problems the last check found, joined, in the order of
// their subjects; nil when it found none.
func (c *Checker) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	subjects := make([]string, 0, len(c.found))
	for s := range c.found {
		subjects = append(subjects, s)
	}
	slices.Sort(subjects)
	errs := make([]error, 0, len(subjects))
	for _, s := range subjects {
		errs = append(errs, c.found[s].Err)
	}
	return errors.Join(errs...)
}

// Unreachable is the problem of brokers that did not answer a check.
func Unreachable(pkg string, err error) Problem {
	return Problem{Subject: "brokers", Level: slog.LevelError, Msg: "redeliver: the brokers do not answer", Stops: true,
		Err: fmt.Errorf("%s: the brokers do not answer: %w", pkg, err)}
}

// DeadLetterUnreachable is the problem of the brokers of a dead-letter
// publisher, which may not be the consumer's, that did not answer a check.
func DeadLetterUnreachable(pkg string, err error) Problem {
	return Problem{Subject: "dead-letter brokers", Level: slog.LevelError, Msg: "redeliver: the brokers of the dead-letter publisher do not answer",
		Err: fmt.Errorf("%s: the brokers of the dead-letter publisher do not answer: %w", pkg, err)}
}

// Topic is the problem of a topic the consumer reads (role "consumed") or
// writes to (role "dead-letter") that the brokers answered with err: it
// does not exist, or may not be used.
func Topic(pkg, topic, role string, err error) Problem {
	msg := "redeliver: a topic the consumer reads is not there: it waits for it (create it, or check its name)"
	if role == "dead-letter" {
		msg = "redeliver: a dead-letter topic is not there: every dead letter to it fails, and its partition waits, until it is created"
	}
	return Problem{Subject: "topic " + topic, Level: slog.LevelWarn, Msg: msg, Stops: role == "consumed",
		Err: fmt.Errorf("%s: %s topic %q: %w", pkg, role, topic, err)}
}
