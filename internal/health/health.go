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
}

// Checker runs checks and keeps the problems the last one found. Its zero
// value is ready to use; set Log first. It is safe for concurrent use.
type Checker struct {
	Log *slog.Logger

	mu    sync.Mutex
	found map[string]Problem // by subject
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
		t := time.NewTimer(interval)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		}
	}
}

// set makes ps the problems found, logging what changed.
func (c *Checker) set(ps []Problem) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := make(map[string]Problem, len(ps))
	for _, p := range ps {
		now[p.Subject] = p
		if old, ok := c.found[p.Subject]; !ok || old.Err.Error() != p.Err.Error() {
			c.Log.Log(context.Background(), p.Level, p.Msg, "subject", p.Subject, "error", p.Err)
		}
	}
	for s, old := range c.found {
		if _, ok := now[s]; !ok {
			c.Log.Info("redeliver: start check passes now", "subject", s, "error_was", old.Err)
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
	return Problem{Subject: "brokers", Level: slog.LevelError, Msg: "redeliver: the brokers do not answer",
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
	return Problem{Subject: "topic " + topic, Level: slog.LevelWarn, Msg: msg,
		Err: fmt.Errorf("%s: %s topic %q: %w", pkg, role, topic, err)}
}
