package franzhost_test

import (
	"context"
	"log"
	"os/signal"
	"syscall"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redeliver-go/redeliver/adapters/franz/franzhost"
	"github.com/redeliver-go/redeliver/host"
	"github.com/redeliver-go/redeliver/hostconfig"
	"github.com/redeliver-go/redeliver/stream"
)

// A host whose triggers run on franz-go: the adapter is given with
// host.WithAdapter, with the client options every client shares.
func Example() {
	cfg, err := hostconfig.Load("host.json") // policies and triggers
	if err != nil {
		log.Fatal(err)
	}
	franz, err := franzhost.New(franzhost.WithKgoOptions(kgo.ClientID("orders-service")))
	if err != nil {
		log.Fatal(err)
	}
	h, err := host.New(cfg, host.WithAdapter(franz), host.WithBrokers("127.0.0.1:9092"))
	if err != nil {
		log.Fatal(err)
	}
	orders := stream.HandlerFunc(func(ctx context.Context, b *stream.Batch) error { return nil })
	if err := h.Register("orders", orders, host.Kafka{Topic: "orders", Group: "orders-app"}); err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := h.Run(ctx); err != nil { // nil after Ctrl-C
		log.Fatal(err)
	}
}
