//go:build ignore

// The confluent-kafka-go adapter: a consumer that runs until its context
// ends (librdkafka through cgo).
package main

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/redeliver-go/redeliver/adapters/confluent"
	"github.com/redeliver-go/redeliver/stream"
)

func main() {
	proc, err := stream.NewProcessor(stream.HandlerFunc(func(context.Context, *stream.Batch) error { return nil }))
	if err != nil {
		log.Fatal(err)
	}
	c, err := confluent.New(proc, confluent.WithGroup(kafka.ConfigMap{
		"bootstrap.servers": "127.0.0.1:9", "group.id": "orders", "log_level": 0}, "orders"))
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := c.Run(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("confluent: ok")
}
