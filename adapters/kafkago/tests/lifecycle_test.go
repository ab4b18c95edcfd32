package tests

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/redeliver-go/redeliver/adapters/kafkago"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// A zero or nil Consumer or Publisher, a nil option or a nil argument gets
// an error that says what to call, never a panic.
func TestZeroValuesAndNilArguments(t *testing.T) {
	proc := newProcessor(t, streamtest.Succeed)
	ctx := context.Background()
	var zero kafkago.Consumer
	var nilc *kafkago.Consumer
	var nilp *kafkago.Publisher
	gc := kafkago.WithGroupConfig(kafka.ConsumerGroupConfig{ID: "g", Brokers: []string{"127.0.0.1:1"}, Topics: []string{"t"}})
	for _, tc := range []struct {
		name string
		call func() error
		want string
	}{
		{"Run of a zero Consumer", func() error { return zero.Run(ctx) }, "kafkago.New"},
		{"Close of a zero Consumer", func() error { return zero.Close() }, "kafkago.New"},
		{"Run of a nil *Consumer", func() error { return nilc.Run(ctx) }, "kafkago.New"},
		{"Close of a nil *Consumer", func() error { return nilc.Close() }, "kafkago.New"},
		{"New with a nil option", func() error {
			_, err := kafkago.New(proc, gc, nil)
			return err
		}, "option 2 of New is nil"},
		{"New with a nil processor", func() error {
			_, err := kafkago.New(nil, gc)
			return err
		}, "nil processor"},
		{"New without a group", func() error {
			_, err := kafkago.New(proc)
			return err
		}, "WithGroupConfig"},
		{"NewPublisher(nil)", func() error {
			_, err := kafkago.NewPublisher(nil)
			return err
		}, "nil writer"},
		{"Publish of a nil *Publisher", func() error { return nilp.Publish(ctx, "t", []stream.Record{{}}) }, "NewPublisher"},
		{"Publish of a zero Publisher", func() error { return new(kafkago.Publisher).Publish(ctx, "t", []stream.Record{{}}) }, "NewPublisher"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

// Close called from a handler, a hook or the WithOnAssigned function
// returns, and so does Run.
func TestCloseFromInside(t *testing.T) {
	for _, from := range []string{"handler", "hook", "OnAssigned"} {
		t.Run(from, func(t *testing.T) {
			_, addrs := newCluster(t, "t", 2)
			produce(t, addrs, "t", 0, 0, 10)
			var (
				cp     atomic.Pointer[kafkago.Consumer]
				closed = make(chan error, 1)
			)
			closeIt := func() {
				if c := cp.Load(); c != nil {
					select {
					case closed <- c.Close():
					default:
					}
				}
			}
			h := stream.HandlerFunc(func(context.Context, *stream.Batch) error {
				if from == "handler" {
					closeIt()
				}
				return nil
			})
			var opts []stream.Option
			if from == "hook" {
				opts = append(opts, stream.WithHooks(stream.Hooks{Delivered: func(stream.DeliveredEvent) { closeIt() }}))
			}
			kopts := []kafkago.Option{kafkago.WithGroupConfig(groupConfig(addrs, "g", "t"))}
			if from == "OnAssigned" {
				kopts = append(kopts, kafkago.WithOnAssigned(func(map[string][]int32) { closeIt() }))
			}
			c, err := kafkago.New(newProcessor(t, h, opts...), kopts...)
			if err != nil {
				t.Fatal(err)
			}
			cp.Store(c)
			done := make(chan error, 1)
			go func() { done <- c.Run(context.Background()) }()
			select {
			case err := <-closed:
				if err != nil {
					t.Fatalf("Close from the %s: %v", from, err)
				}
			case <-time.After(wait):
				t.Fatalf("Close called from the %s did not return", from)
			}
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("Run returned %v after Close, want nil", err)
				}
			case <-time.After(wait):
				t.Fatalf("Run did not return after Close from the %s", from)
			}
		})
	}
}
