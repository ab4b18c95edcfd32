package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"

	"github.com/redeliver-go/redeliver/stream"
)

// Source is a trigger the host does not build itself, given in code to
// [Host.Register]: an Event Hub through the adapters/eventhubs module, or
// any other consumer of a [stream.Processor]. The host builds the
// function's processor as for a Kafka trigger (its policy from host.json,
// the host's hooks, middleware, telemetry and status) and gives it to New;
// Run runs what New returns beside the other functions and stops it with
// them. The host module stays free of the client New uses:
//
//	h.Register("telemetry", handler, host.Source{
//		Describe: "event hub telemetry, consumer group $Default",
//		Topic:    "telemetry",
//		New: func(proc *stream.Processor) (func(context.Context) error, error) {
//			c, err := eventhubs.New(proc, consumerClient, checkpointStore)
//			if err != nil {
//				return nil, err
//			}
//			return c.Run, nil
//		},
//	})
//
// A trigger for the same function in host.json's triggers section
// replaces the Source, as it replaces a [Kafka] given in code.
//
// The host does not give its drain time ([WithDrain]) to a consumer it
// does not build: a consumer with a drain time of its own, such as
// eventhubs.WithDrain (25s by default, the host's default too), stops
// within the shorter of the two, and both report a handler that holds the
// stop. Give it the host's drain time when you change that.
type Source struct {
	// Describe says what triggers the function, for the status page, e.g.
	// "event hub telemetry, consumer group $Default". Required.
	Describe string
	// Topic is the name the stream's records carry as their topic (the
	// event hub's name for Event Hubs): the status page lists the parked
	// entries of that topic. Optional.
	Topic string
	// New returns the function that consumes through proc until its
	// context is done, returning nil after a clean shutdown, as the
	// adapters' Run methods do. Required. A panic of New or of run stops
	// the host with an error that names the function, as a failure does
	// (the stack goes to the log); the process goes on.
	New func(proc *stream.Processor) (run func(context.Context) error, err error)
	// Ready, when set, reports whether the consumer is ready (joined,
	// partitions owned), for /readyz. Without it the function counts as
	// ready once its consumer runs.
	Ready func() bool
}

func (s Source) applyFunction(f *function) { t := s; f.source = &t; f.code = nil }

// newRun calls New, turning a panic into an error.
func (s *Source) newRun(proc *stream.Processor) (run func(context.Context) error, err error) {
	defer func() {
		if v := recover(); v != nil {
			run, err = nil, panicked("host.Source's New", v)
		}
	}()
	return s.New(proc)
}

// callRun runs f's consumer until ctx is done. A panic of the consumer (a
// host.Source's run function is the application's code) is logged with
// its stack and returned as an error, which stops the host as any failure
// of a function does, rather than ending the process.
func (f *function) callRun(ctx context.Context, log *slog.Logger) (err error) {
	defer func() {
		if v := recover(); v != nil {
			log.Error("redeliver: function's consumer panicked", "function", f.name, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			err = panicked("its consumer", v)
		}
	}()
	return f.run(ctx)
}

// panicked describes a recovered panic of what, wrapping v when it is an
// error.
func panicked(what string, v any) error {
	if err, ok := v.(error); ok {
		return fmt.Errorf("%s panicked: %w", what, err)
	}
	return fmt.Errorf("%s panicked: %v", what, v)
}

// check reports what is missing in s.
func (s *Source) check() error {
	switch {
	case s.New == nil:
		return errors.New("host.Source without New")
	case s.Describe == "":
		return errors.New("host.Source without Describe")
	}
	return nil
}
