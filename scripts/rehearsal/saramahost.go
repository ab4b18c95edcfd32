//go:build ignore

// The functions host on sarama: a function bound to a Kafka trigger from
// host.json, whose dead letters go through the adapter's producer, run
// until its context ends.
package main

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/redeliver-go/redeliver/adapters/sarama/saramahost"
	"github.com/redeliver-go/redeliver/host"
	"github.com/redeliver-go/redeliver/hostconfig"
	"github.com/redeliver-go/redeliver/stream"
)

const hostJSON = `{
  "version": "2.0",
  "checkpointRetryPolicy": { "retryCount": 3, "sleepDuration": "00:00:01", "onExhausted": { "action": "deadLetter", "topic": "payments.dlq" } },
  "triggers": { "payments": { "type": "kafka", "adapter": "sarama", "topic": "payments", "consumerGroup": "payments" } }
}`

func main() {
	cfg, err := hostconfig.Parse("host.json", []byte(hostJSON))
	if err != nil {
		log.Fatal(err)
	}
	ad, err := saramahost.New()
	if err != nil {
		log.Fatal(err)
	}
	h, err := host.New(cfg, host.WithAdapter(ad), host.WithBrokers("127.0.0.1:9"))
	if err != nil {
		log.Fatal(err)
	}
	if err := h.Register("payments", stream.HandlerFunc(func(context.Context, *stream.Batch) error { return nil })); err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := h.Run(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("saramahost: ok")
}
