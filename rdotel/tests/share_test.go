package tests

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/internal/leases"
	"github.com/redeliver-go/redeliver/rdotel"
	"github.com/redeliver-go/redeliver/stream"
)

// In share mode (records as units, through the engine's lease driver) the
// telemetry counts what it counts in checkpoint mode: a record given up
// and dead-lettered counts in redeliver.batches.given_up and in
// redeliver.exhaustion.actions (which read 0 in share mode when the share
// consumer had a retry engine of its own, issue 47).
func TestShareModeMetrics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reader := sdkmetric.NewManualReader()
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		tel, err := rdotel.New(rdotel.WithMeterProvider(mp), rdotel.WithConsumerGroup("billing"), rdotel.WithExhaustionAction("dead_letter"))
		if err != nil {
			t.Fatal(err)
		}
		var dead []stream.Record
		dl, err := stream.DeadLetter(publisher(func(_ string, recs []stream.Record) { dead = append(dead, recs...) }), "orders.dlq")
		if err != nil {
			t.Fatal(err)
		}
		proc, err := stream.NewProcessor(stream.Chain(stream.PerRecord(func(_ context.Context, r *stream.Record) error {
			if r.Offset == 1 {
				return errDown
			}
			return nil
		}), tel.Middleware()), stream.WithHooks(tel.Hooks()), stream.WithExhaustionAction(dl),
			stream.WithPolicy(checkpoint.Policy{MaxRetries: 1, Backoff: checkpoint.Fixed(time.Second)}))
		if err != nil {
			t.Fatal(err)
		}
		d, err := leases.New(proc, leases.Config[stream.Record]{})
		if err != nil {
			t.Fatal(err)
		}
		var poll leasePoll
		for off := range int64(3) {
			poll = append(poll, &lease{rec: stream.Record{Topic: "orders", Partition: 0, Offset: off}, deadline: time.Now().Add(time.Hour)})
		}
		d.Lane(nil).Settle(t.Context(), poll)
		if len(dead) != 1 || header(dead[0], stream.HeaderOffset) != "1" {
			t.Fatalf("%d dead letters, want offset 1's", len(dead))
		}
		m := collect(t, reader)
		if got := sum(t, m["redeliver.exhaustion.actions"]); got != 1 {
			t.Errorf("redeliver.exhaustion.actions %d, want 1", got)
		}
		if got := sum(t, m["redeliver.batches.given_up"]); got != 1 {
			t.Errorf("redeliver.batches.given_up %d, want 1", got)
		}
		if got := sum(t, m["redeliver.retries.scheduled"]); got != 1 {
			t.Errorf("redeliver.retries.scheduled %d, want 1", got)
		}
	})
}

type lease struct {
	rec      stream.Record
	deadline time.Time
	settled  string
}

func (l *lease) Record() *stream.Record { return &l.rec }
func (l *lease) Deliveries() int        { return 1 }
func (l *lease) Deadline() time.Time    { return l.deadline }
func (l *lease) Hold(time.Time) bool    { return true }
func (l *lease) Accept()                { l.settled = "accept" }
func (l *lease) Release()               { l.settled = "release" }
func (l *lease) Reject()                { l.settled = "reject" }

type leasePoll []*lease

func (p leasePoll) Leases() []leases.Lease[stream.Record] {
	out := make([]leases.Lease[stream.Record], len(p))
	for i, l := range p {
		out[i] = l
	}
	return out
}

func (leasePoll) Tend(context.Context, time.Time, []leases.Lease[stream.Record], bool) time.Time {
	return time.Time{}
}
