package hostconfig

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/redeliver-go/redeliver/checkpoint"

	"github.com/redeliver-go/redeliver/stream"
)

// An Option selects what [Config.Options] and [Config.Policy] convert:
// [Function] for a function's policy, [Park] for the re-drive's park
// action.
type Option interface{ apply(*selection) }

type selection struct {
	function    string
	hasFunction bool
	park        stream.ExhaustionAction
	parkOpt     stream.Option // ParkOption's
	hasPark     bool
	err         error // the first option that cannot mean what it says
}

// fail records err unless an earlier option failed.
func (s *selection) fail(err error) {
	if s.err == nil {
		s.err = err
	}
}

type optionFunc func(*selection)

func (f optionFunc) apply(s *selection) { f(s) }

// Function selects the policy in force for the function called name: its
// own, from checkpointRetryPolicy.functions with the host-wide settings it
// does not set, or the host-wide policy when the file gives it none.
// Without it, [Config.Options] and [Config.Policy] convert the host-wide
// policy. A name the file names nowhere that is one or two letters from a
// function with a policy of its own is an error with a suggestion, not the
// host-wide policy in silence. An empty name, or a second Function in one
// call, is an error.
func Function(name string) Option {
	return optionFunc(func(s *selection) {
		switch {
		case s.hasFunction:
			s.fail(fmt.Errorf("hostconfig: Function(%q) after Function(%q): one function per call", name, s.function))
		case name == "":
			s.fail(errors.New(`hostconfig: Function(""): empty name: leave Function out for the host-wide policy`))
		}
		s.function, s.hasFunction = name, true
	})
}

// Park gives the exhaustion action of a policy whose onExhausted is park:
// typically redrive.Park(store, expiry) with the redrive section's expiry
// (the functions host builds it from its re-drive store). Without it, such
// a policy is an error, since there is nowhere to park the records. A nil
// action, or a second Park in one call, is an error.
func Park(action stream.ExhaustionAction) Option {
	return optionFunc(func(s *selection) {
		switch {
		case s.parkOpt != nil:
			s.fail(errors.New("hostconfig: Park beside ParkOption: one park per call"))
		case s.hasPark:
			s.fail(errors.New("hostconfig: Park given twice: one park action per call"))
		case action == nil:
			s.fail(errors.New("hostconfig: Park(nil): want the action of redrive.Park"))
		}
		s.park, s.hasPark = action, true
	})
}

// ParkOption is [Park] for a park that comes as a processor option
// bringing its own exhaustion action: redrive.ParkByKey's, which keeps each
// key's order in stream.ByKey ordering. A policy whose onExhausted is park
// then converts to opt in place of stream.WithExhaustionAction. A nil
// option, or ParkOption beside Park or a second ParkOption, is an error.
func ParkOption(opt stream.Option) Option {
	return optionFunc(func(s *selection) {
		switch {
		case s.hasPark:
			s.fail(errors.New("hostconfig: ParkOption beside Park or another ParkOption: one park per call"))
		case opt == nil:
			s.fail(errors.New("hostconfig: ParkOption(nil): want the option of redrive.ParkByKey"))
		}
		s.parkOpt, s.hasPark = opt, true
	})
}

// selected returns the policy opts select, and the selection.
func (c *Config) selected(opts []Option) (*RetryPolicy, selection, error) {
	var s selection
	for i, o := range opts {
		if o == nil {
			return nil, s, fmt.Errorf("hostconfig: option %d of %d is nil", i+1, len(opts))
		}
		o.apply(&s)
	}
	if s.err != nil {
		return nil, s, s.err
	}
	if c == nil {
		return nil, s, errors.New("hostconfig: nil *Config: load it with hostconfig.Load, Parse or Read")
	}
	if !s.hasFunction {
		return c.Host, s, nil
	}
	if p, ok := c.function(s.function); ok {
		return p, s, nil
	}
	// A name the file neither gives a policy nor a trigger, next to one it
	// gives a policy: a misspelling in the program, which would otherwise
	// run that function on the host-wide policy without a word.
	if _, isTrigger := c.Triggers[s.function]; !isTrigger {
		if near := suggest(s.function, slices.Sorted(maps.Keys(c.Functions))); near != "" {
			return nil, s, fmt.Errorf("hostconfig: %s: function %q has no policy of its own in checkpointRetryPolicy.functions: did you mean %s? (a function that follows the host-wide policy needs no Function option)",
				c.File, s.function, near)
		}
	}
	return c.Host, s, nil
}

// Policy converts the selected policy (the host-wide one, or a function's
// with [Function]) into a [checkpoint.Policy]: the zero Policy, which
// never retries, when the file sets none.
func (c *Config) Policy(opts ...Option) (checkpoint.Policy, error) {
	p, _, err := c.selected(opts)
	if err != nil {
		return checkpoint.Policy{}, err
	}
	return p.Policy()
}

// Options converts the selected policy (the host-wide one, or a
// function's with [Function]) into [stream.Processor] options:
// [stream.WithPolicy] with its [checkpoint.Policy], and for its exhaustion
// action [stream.WithExhaustionAction] with [stream.StopPartition] (stop),
// [stream.DeadLetter] to pub (deadLetter) or the action given with [Park]
// (park). pub is used by deadLetter only, for which it must not be nil;
// skip keeps the Processor's default, which moves past the batch.
//
// When the outageBudget section is on, each call adds
// [stream.WithOutageBudget] with a new budget: one per processor. To share
// one budget among a host's processors, make it with
// [OutageBudget.Budget] and give each processor that option yourself.
func (c *Config) Options(pub stream.Publisher, opts ...Option) ([]stream.Option, error) {
	p, s, err := c.selected(opts)
	if err != nil {
		return nil, err
	}
	popts, err := p.options(pub, s.park, s.parkOpt)
	if err != nil {
		return nil, err
	}
	return c.budgetOption(popts)
}

func (p *RetryPolicy) options(pub stream.Publisher, park stream.ExhaustionAction, parkOpt stream.Option) ([]stream.Option, error) {
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
		switch {
		case parkOpt != nil:
			opts = append(opts, parkOpt)
		case park != nil:
			opts = append(opts, stream.WithExhaustionAction(park))
		default:
			return nil, fmt.Errorf("hostconfig: %s: onExhausted park needs a re-drive store: give Config.Options the option hostconfig.Park(action), with action from redrive.Park", p.Origin)
		}
	default:
		return nil, fmt.Errorf("hostconfig: %s: unknown exhaustion action %v", p.Origin, p.OnExhausted.Action)
	}
	return opts, nil
}
