package hostconfig

import (
	"fmt"

	"github.com/redeliver-go/redeliver/stream"
)

// Options converts the host-wide policy into [stream.Processor] options:
// [stream.WithPolicy] with the policy of [Config.Policy], and for the
// exhaustion action, [stream.WithExhaustionAction] with
// [stream.StopPartition] (stop) or [stream.DeadLetter] to pub (deadLetter).
// pub is only used by deadLetter, for which it must not be nil; skip keeps
// the Processor's default, which moves past the batch.
//
// When the outageBudget section is on, each call adds
// [stream.WithOutageBudget] with a new budget: one per processor. To share
// one budget among a host's processors, make it with
// [OutageBudget.Budget] and give each processor that option yourself.
func (c *Config) Options(pub stream.Publisher) ([]stream.Option, error) {
	return c.withBudget(c.Host.options(pub, nil))
}

func (c *Config) withBudget(opts []stream.Option, err error) ([]stream.Option, error) {
	if err != nil {
		return nil, err
	}
	return c.budgetOption(opts)
}

// FunctionOptions converts the policy of the function called name (see
// [Config.FunctionPolicy], whose errors it shares) into [stream.Processor]
// options, as [Config.Options] does.
func (c *Config) FunctionOptions(name string, pub stream.Publisher) ([]stream.Option, error) {
	p, err := c.ownFunction(name)
	if err != nil {
		return nil, err
	}
	return c.withBudget(p.options(pub, nil))
}

// OptionsWithPark is [Config.Options] for a policy whose onExhausted may be
// park: park is the exhaustion action it then uses, typically
// redrive.Park(store, cfg.Redrive.Expiry) (redrive.HostOptions builds both).
func (c *Config) OptionsWithPark(pub stream.Publisher, park stream.ExhaustionAction) ([]stream.Option, error) {
	return c.withBudget(c.Host.options(pub, park))
}

// FunctionOptionsWithPark is [Config.FunctionOptions] for a policy whose
// onExhausted may be park; see [Config.OptionsWithPark].
func (c *Config) FunctionOptionsWithPark(name string, pub stream.Publisher, park stream.ExhaustionAction) ([]stream.Option, error) {
	p, err := c.ownFunction(name)
	if err != nil {
		return nil, err
	}
	return c.withBudget(p.options(pub, park))
}

func (p *RetryPolicy) options(pub stream.Publisher, park stream.ExhaustionAction) ([]stream.Option, error) {
	cp, err := p.Policy()
	if err != nil {
		return nil, err
	}
	opts := []stream.Option{stream.WithPolicy(cp)}
	if p == nil {
		return opts, nil
	}
	switch p.OnExhausted.Action {
	case ActionSkip:
	case ActionStop:
		opts = append(opts, stream.WithExhaustionAction(stream.StopPartition))
	case ActionDeadLetter:
		if pub == nil {
			return nil, fmt.Errorf("hostconfig: %s: onExhausted deadLetter needs a stream.Publisher to send the batch to topic %q", p.Origin, p.OnExhausted.Topic)
		}
		if p.OnExhausted.Topic == "" {
			return nil, fmt.Errorf("hostconfig: %s: onExhausted deadLetter has no topic", p.Origin)
		}
		dl, err := stream.DeadLetter(pub, p.OnExhausted.Topic)
		if err != nil {
			return nil, fmt.Errorf("hostconfig: %s: onExhausted deadLetter: %w", p.Origin, err)
		}
		opts = append(opts, stream.WithExhaustionAction(dl))
	case ActionPark:
		if park == nil {
			return nil, fmt.Errorf("hostconfig: %s: onExhausted park needs a re-drive store: build the options with redrive.HostOptions, or Config.OptionsWithPark and redrive.Park", p.Origin)
		}
		opts = append(opts, stream.WithExhaustionAction(park))
	default:
		return nil, fmt.Errorf("hostconfig: %s: unknown exhaustion action %v", p.Origin, p.OnExhausted.Action)
	}
	return opts, nil
}
