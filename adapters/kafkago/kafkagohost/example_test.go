package kafkagohost_test

import (
	"context"
	"log"
	"os/signal"
	"syscall"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/redeliver-go/redeliver/adapters/kafkago/kafkagohost"
	"github.com/redeliver-go/redeliver/host"
	"github.com/redeliver-go/redeliver/hostconfig"
	"github.com/redeliver-go/redeliver/stream"
)

// A host whose triggers run on kafka-go ("adapter": "kafkago" in
// host.json's triggers, or host.Kafka's Adapter field): the program builds
// no franz-go.
func Example() {
	cfg, err := hostconfig.Load("host.json") // policies and triggers
	if err != nil {
		log.Fatal(err)
	}
	kafkago, err := kafkagohost.New(kafkagohost.WithGroupConfig(func(gc *kafka.ConsumerGroupConfig) {
		gc.SessionTimeout = 10 * time.Second
	}))
	if err != nil {
		log.Fatal(err)
	}
	h, err := host.New(cfg, host.WithAdapter(kafkago), host.WithBrokers("127.0.0.1:9092"))
	if err != nil {
		log.Fatal(err)
	}
	payments := stream.HandlerFunc(func(ctx context.Context, b *stream.Batch) error { return nil })
	if err := h.Register("payments", payments, host.Kafka{Adapter: "kafkago", Topic: "payments", Group: "payments-app"}); err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := h.Run(ctx); err != nil { // nil after Ctrl-C
		log.Fatal(err)
	}
}
