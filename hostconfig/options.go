package hostconfig

import (
	"fmt"

	"github.com/redeliver-go/redeliver/stream"
)

// Options converts the host-wide policy into [stream.Processor] options:
// [stream.WithPolicy] with the policy of [Config.Policy].
//
// The exhaustion actions deadLetter and stop are parsed and validated but
// not wired yet: Options returns an error for a policy that sets one, rather
// than let the Processor skip batches silently. Use [Config.Policy] and
// [stream.WithExhaustionAction] to handle them yourself.
func (c *Config) Options() ([]stream.Option, error) {
	return c.Host.options()
}

// FunctionOptions converts the policy in force for the function called
// name (see [Config.Function]) into [stream.Processor] options, as
// [Config.Options] does.
func (c *Config) FunctionOptions(name string) ([]stream.Option, error) {
	return c.Function(name).options()
}

func (p *RetryPolicy) options() ([]stream.Option, error) {
	cp, err := p.Policy()
	if err != nil {
		return nil, err
	}
	if p != nil && p.OnExhausted.Action != Skip {
		return nil, fmt.Errorf("hostconfig: %s: onExhausted %v is not supported by Options yet: use Policy and stream.WithExhaustionAction", p.Origin, p.OnExhausted.Action)
	}
	return []stream.Option{stream.WithPolicy(cp)}, nil
}
