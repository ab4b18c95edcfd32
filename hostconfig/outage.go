package hostconfig

import (
	"fmt"
	"strings"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/stream"
)

// sectionOutage is the outage budget's section.
const sectionOutage = "outageBudget"

// OutageBudget is host.json's outageBudget section: an outage budget for
// each processor (see [stream.Budget]), which tells a downstream outage
// from a poison batch. The section turns it on; every field is optional:
//
//	"outageBudget": {
//	  "maxTokens": 10,           // the budget: a failure spends 1 ...
//	  "tokenRatio": 0.1,         // ... a success refills 0.1
//	  "minPartitions": 2,        // partitions failing at once for an outage
//	  "probeDelay": "00:00:01",  // before the first probe, doubled after each failed one ...
//	  "maxProbeDelay": "00:00:30" // ... up to this
//	}
//
// "enabled": false keeps the section but turns the budget off (an
// environment override can then turn it on or off). Without the section
// there is no budget: every failure counts toward its batch's give-up.
type OutageBudget struct {
	// Origin says where the section was read, e.g. "outageBudget (host.json:9:19)".
	Origin string
	// Enabled is true unless the section says "enabled": false.
	Enabled bool
	// MaxTokens, TokenRatio and MinPartitions are those of
	// [stream.BudgetConfig], their defaults filled in (10, 0.1, 2).
	MaxTokens     float64
	TokenRatio    float64
	MinPartitions int
	// ProbeDelay is the wait before an outage's first probe (default 1s);
	// it doubles after each failed probe, up to MaxProbeDelay (default
	// 30s).
	ProbeDelay    time.Duration
	MaxProbeDelay time.Duration
	// Settings lists the fields the section sets, in the order of
	// outageFields, with where each was read (file or environment).
	Settings []Setting
}

var outageFields = []string{"enabled", "maxTokens", "tokenRatio", "minPartitions", "probeDelay", "maxProbeDelay"}

// outageBudget decodes the outageBudget section.
func (d *decoder) outageBudget(n *node) *OutageBudget {
	o := &OutageBudget{Origin: n.path + " (" + d.pos(n) + ")", Enabled: true, MaxTokens: 10, TokenRatio: 0.1, MinPartitions: 2,
		ProbeDelay: time.Second, MaxProbeDelay: 30 * time.Second}
	f := d.fields(n, outageFields)
	if f == nil {
		return o
	}
	o.Settings = d.settingsOf(f, outageFields, nil)
	if m := f["enabled"]; m != nil {
		o.Enabled = d.flag(m.val)
	}
	if m := f["maxTokens"]; m != nil {
		o.MaxTokens = d.number(m.val, 1, 1000)
	}
	if m := f["tokenRatio"]; m != nil {
		if v := d.number(m.val, 0.001, 1000); v != 0 {
			o.TokenRatio = v
			if v > o.MaxTokens && o.MaxTokens > 0 {
				d.add(m.val, "%v is more than maxTokens (%v): one success would refill the whole budget", v, o.MaxTokens)
			}
		}
	}
	if m := f["minPartitions"]; m != nil {
		if v, ok := d.integer(m.val); ok {
			if v < 2 {
				d.add(m.val, "%d: want 2 or more (with one partition failing, an outage and a poison batch cannot be told apart)", v)
			}
			o.MinPartitions = v
		}
	}
	positive := func(key string, into *time.Duration) {
		if m := f[key]; m != nil {
			v := d.duration(m.val)
			if v == 0 && !d.failedAt(m.val) {
				d.add(m.val, "want an interval greater than 0")
			}
			*into = v
		}
	}
	positive("probeDelay", &o.ProbeDelay)
	positive("maxProbeDelay", &o.MaxProbeDelay)
	if o.MaxProbeDelay > 0 && o.MaxProbeDelay < o.ProbeDelay {
		if m := f["maxProbeDelay"]; m != nil {
			d.add(m.val, "%v is less than probeDelay (%v): want the longest wait between probes, at least the first", show(o.MaxProbeDelay), show(o.ProbeDelay))
		} else {
			d.add(f["probeDelay"].val, "%v is more than maxProbeDelay, whose default is %v: the first probe would wait %v; set maxProbeDelay to %v or more",
				show(o.ProbeDelay), show(o.MaxProbeDelay), show(o.MaxProbeDelay), show(o.ProbeDelay))
		}
	}
	return o
}

// Config returns the section as a [stream.BudgetConfig].
func (o *OutageBudget) Config() stream.BudgetConfig {
	return stream.BudgetConfig{MaxTokens: o.MaxTokens, TokenRatio: o.TokenRatio, MinPartitions: o.MinPartitions,
		ProbeBackoff: checkpoint.Capped(o.MaxProbeDelay, checkpoint.Exponential(o.ProbeDelay))}
}

// Budget returns a new budget as the section configures it, or nil when
// the section is off.
func (o *OutageBudget) Budget() (*stream.Budget, error) {
	if o == nil || !o.Enabled {
		return nil, nil
	}
	b, err := stream.NewBudget(o.Config())
	if err != nil {
		return nil, fmt.Errorf("hostconfig: %s: %w", o.Origin, err)
	}
	return b, nil
}

// Explain describes the outage budget in words.
func (o *OutageBudget) Explain() string {
	if !o.Enabled {
		return "Outage budget: off (enabled is false): every failure counts toward its batch's give-up, even when every partition fails at once.\n"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Outage budget: %v tokens per processor; a failed delivery spends 1, a successful one refills %v. ", o.MaxTokens, o.TokenRatio)
	then := fmt.Sprintf("doubling up to every %v", show(o.MaxProbeDelay))
	if o.ProbeDelay >= o.MaxProbeDelay {
		then = fmt.Sprintf("every %v", show(o.MaxProbeDelay))
	}
	fmt.Fprintf(&b, "When %v or fewer are left while %d or more partitions are failing, it is an outage, not a poison batch: "+
		"failures spend no retries and nothing is given up, the failing partitions wait, and one batch at a time probes the downstream, "+
		"%v after the outage began, then %s, until a delivery succeeds and every partition goes on.\n",
		o.MaxTokens/2, o.MinPartitions, show(o.ProbeDelay), then)
	return b.String()
}

// budgetOption appends the outage budget's option to opts: a new budget
// for the processor the options are for.
func (c *Config) budgetOption(opts []stream.Option) ([]stream.Option, error) {
	b, err := c.OutageBudget.Budget()
	if err != nil || b == nil {
		return opts, err
	}
	return append(opts, stream.WithOutageBudget(b)), nil
}
