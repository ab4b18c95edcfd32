package tests

import (
	"context"
	"strings"
	"testing"

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
