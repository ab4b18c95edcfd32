package franz_test

import (
	"context"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redeliver-go/redeliver/adapters/franz"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// The tests of this module need no broker; those that do are in the
// module adapters/franz/tests, so that the adapter's module requires
// nothing a program using it does not build.

func newProcessor(t *testing.T, h stream.Handler, opts ...stream.Option) *stream.Processor {
	t.Helper()
	p, err := stream.NewProcessor(h, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// A zero or nil Consumer or Publisher, a nil option or a nil argument gets
// an error that says what to call, never a panic.
func TestZeroValuesAndNilArguments(t *testing.T) {
	proc := newProcessor(t, streamtest.Succeed)
	ctx := context.Background()
	var zero franz.Consumer
	var nilc *franz.Consumer
	var nilp *franz.Publisher
	for _, tc := range []struct {
		name string
		call func() error
		want string
	}{
		{"Run of a zero Consumer", func() error { return zero.Run(ctx) }, "franz.New"},
		{"Close of a zero Consumer", func() error { return zero.Close() }, "franz.New"},
		{"Run of a nil *Consumer", func() error { return nilc.Run(ctx) }, "franz.New"},
		{"Close of a nil *Consumer", func() error { return nilc.Close() }, "franz.New"},
		{"New with a nil option", func() error {
			_, err := franz.New(proc, nil)
			return err
		}, "option 1 of New is nil"},
		{"New with a nil kgo option", func() error {
			_, err := franz.New(proc, franz.WithKgoOptions(kgo.SeedBrokers("127.0.0.1:1"), nil))
			return err
		}, "kgo option 2 is nil"},
		{"New with WithClient(nil)", func() error {
			_, err := franz.New(proc, franz.WithClient(nil))
			return err
		}, "WithClient(nil)"},
		{"New with a nil processor", func() error {
			_, err := franz.New(nil, franz.WithKgoOptions(kgo.SeedBrokers("127.0.0.1:1"), kgo.ConsumerGroup("g"), kgo.ConsumeTopics("t")))
			return err
		}, "nil processor"},
		{"NewPublisher(nil)", func() error {
			_, err := franz.NewPublisher(nil)
			return err
		}, "nil client"},
		{"Publish of a nil *Publisher", func() error { return nilp.Publish(ctx, "t", []stream.Record{{}}) }, "NewPublisher"},
		{"Publish of a zero Publisher", func() error { return new(franz.Publisher).Publish(ctx, "t", []stream.Record{{}}) }, "NewPublisher"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error saying %q", err, tc.want)
			}
		})
	}
	if nilc.Client() != nil {
		t.Error("Client of a nil *Consumer is not nil")
	}
}

// New says in its own words what the options lack, before a client runs:
// no consumer group (kgo's own error was "invalid autocommit options"), or
// nothing to consume (Run idled).
func TestNewRejectsIncompleteKgoOptions(t *testing.T) {
	proc := newProcessor(t, stream.HandlerFunc(func(context.Context, *stream.Batch) error { return nil }))
	for _, tt := range []struct {
		name string
		opts []kgo.Opt
		want string
	}{
		{"no group", []kgo.Opt{kgo.SeedBrokers("127.0.0.1:1"), kgo.ConsumeTopics("t")}, "no consumer group: add kgo.ConsumerGroup"},
		{"no topics", []kgo.Opt{kgo.SeedBrokers("127.0.0.1:1"), kgo.ConsumerGroup("g")}, "consumes no topic: add kgo.ConsumeTopics"},
		{"bad option", []kgo.Opt{kgo.SeedBrokers("127.0.0.1:port"), kgo.ConsumerGroup("g"), kgo.ConsumeTopics("t")}, "franz: "},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := franz.New(proc, franz.WithKgoOptions(tt.opts...))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				if c != nil {
					c.Close()
				}
				t.Fatalf("New: %v, want an error saying %q", err, tt.want)
			}
		})
	}
	// The same checks for a client given with WithClient.
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers("127.0.0.1:1"), kgo.ConsumerGroup("g")}, franz.ClientOptions()...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := franz.New(proc, franz.WithClient(cl)); err == nil || !strings.Contains(err.Error(), "consumes no topic") {
		t.Fatalf("New with a client that consumes nothing: %v", err)
	}
}
