package share_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redeliver-go/redeliver/adapters/franz/share"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// The tests of this package that need no broker; the others are in the
// module adapters/franz/tests.

// A zero or nil Consumer, a nil option or a nil argument gets an error
// that says what to call, never a panic.
func TestZeroValuesAndNilArguments(t *testing.T) {
	proc, err := stream.NewProcessor(streamtest.Succeed)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var zero share.Consumer
	var nilc *share.Consumer
	kopts := share.WithKgoOptions(kgo.SeedBrokers("127.0.0.1:1"), kgo.ShareGroup("g"), kgo.ConsumeTopics("t"))
	for _, tc := range []struct {
		name string
		call func() error
		want string
	}{
		{"Run of a zero Consumer", func() error { return zero.Run(ctx) }, "share.New"},
		{"Close of a zero Consumer", func() error { return zero.Close() }, "share.New"},
		{"Run of a nil *Consumer", func() error { return nilc.Run(ctx) }, "share.New"},
		{"Close of a nil *Consumer", func() error { return nilc.Close() }, "share.New"},
		{"New with a nil option", func() error {
			_, err := share.New(proc, kopts, nil)
			return err
		}, "option 2 of New is nil"},
		{"New with a nil kgo option", func() error {
			_, err := share.New(proc, share.WithKgoOptions(kgo.SeedBrokers("127.0.0.1:1"), nil))
			return err
		}, "kgo option 2 is nil"},
		{"New with a nil processor", func() error {
			_, err := share.New(nil, kopts)
			return err
		}, "nil processor"},
		{"New without kgo options", func() error {
			_, err := share.New(proc)
			return err
		}, "WithKgoOptions"},
		{"New with kgo options that name no share group", func() error {
			_, err := share.New(proc, share.WithKgoOptions(kgo.SeedBrokers("127.0.0.1:1"), kgo.ConsumeTopics("t")))
			return err
		}, "share: the kgo options name no share group: add kgo.ShareGroup(name)"},
		{"New with a consumer group for a share group", func() error {
			_, err := share.New(proc, share.WithKgoOptions(kgo.SeedBrokers("127.0.0.1:1"), kgo.ConsumerGroup("g"), kgo.ConsumeTopics("t")))
			return err
		}, "share: the kgo options name a consumer group (kgo.ConsumerGroup): a share consumer needs kgo.ShareGroup(name) instead"},
		{"New with options kgo refuses for a share group", func() error {
			_, err := share.New(proc, share.WithKgoOptions(kgo.SeedBrokers("127.0.0.1:1"), kgo.ShareGroup("g"), kgo.ConsumeTopics("t"), kgo.DisableAutoCommit()))
			return err
		}, "share: kgo options: autocommit options are not applicable to share groups"},
		{"Run of a consumer of no topic", func() error {
			// franz.New refuses this; the share consumer, whose options
			// are checked as a client holds them, refuses it when Run
			// builds its clients, before it reaches a broker: without,
			// it ran consuming nothing and saying nothing.
			c, err := share.New(proc, share.WithKgoOptions(kgo.SeedBrokers("127.0.0.1:1"), kgo.ShareGroup("g")))
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			return c.Run(ctx)
		}, "share: the consumer consumes no topic: add kgo.ConsumeTopics(topic, ...) to WithKgoOptions"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error saying %q", err, tc.want)
			}
		})
	}
}
