package redrive

import (
	"errors"

	"github.com/redeliver-go/redeliver/hostconfig"
	"github.com/redeliver-go/redeliver/stream"
)

// SchedulerOptions returns the options a host.json redrive section sets:
// interval, retry timeout, maximum re-drives, retry and reply topics, error
// code and batch size. A nil section gives none (the defaults). The store
// is opened by the caller, from r.Store (see hostconfig.RedriveStore).
func SchedulerOptions(r *hostconfig.Redrive) []Option {
	if r == nil {
		return nil
	}
	return []Option{
		WithInterval(r.Interval), WithRetryTimeout(r.RetryTimeout), WithMaxRedrives(r.MaxRedrives),
		WithRetryTopic(r.RetryTopic), WithReplyTopic(r.ReplyTopic), WithErrorCode(r.ErrorCode), WithBatchSize(r.BatchSize),
	}
}

// HostOptions returns the [stream.Processor] options of the host-wide
// policy in cfg, as [hostconfig.Config.Options] does, with onExhausted park
// bound to [Park] on store with the redrive section's expiry (5 minutes
// without a section). opts go to Park (e.g. [WithClock]).
func HostOptions(cfg *hostconfig.Config, pub stream.Publisher, store Store, opts ...Option) ([]stream.Option, error) {
	park, err := hostPark(cfg, store, opts)
	if err != nil {
		return nil, err
	}
	return cfg.OptionsWithPark(pub, park)
}

// FunctionHostOptions is [HostOptions] for the policy in force for the
// function called name.
func FunctionHostOptions(cfg *hostconfig.Config, name string, pub stream.Publisher, store Store, opts ...Option) ([]stream.Option, error) {
	park, err := hostPark(cfg, store, opts)
	if err != nil {
		return nil, err
	}
	return cfg.FunctionOptionsWithPark(name, pub, park)
}

func hostPark(cfg *hostconfig.Config, store Store, opts []Option) (stream.ExhaustionAction, error) {
	if cfg == nil {
		return nil, errors.New("redrive: nil host configuration: load it with hostconfig.Load or hostconfig.Parse")
	}
	if isNil(store) {
		return nil, nil // Options then says park needs a store, if the file asks for it
	}
	expiry := DefaultInterval
	if cfg.Redrive != nil {
		expiry = cfg.Redrive.Expiry
	}
	return Park(store, expiry, opts...)
}
