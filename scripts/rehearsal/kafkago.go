//go:build ignore

// The kafka-go adapter: a consumer that runs until its context ends.
package main

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/redeliver-go/redeliver/adapters/kafkago"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/segmentio/kafka-go"
)

func main() {
	proc, err := stream.NewProcessor(stream.HandlerFunc(func(context.Context, *stream.Batch) error { return nil }))
	if err != nil {
		log.Fatal(err)
	}
	c, err := kafkago.New(proc, kafkago.WithGroupConfig(kafka.ConsumerGroupConfig{
		ID: "orders", Brokers: []string{"127.0.0.1:9"}, Topics: []string{"orders"}}))
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := c.Run(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("kafkago: ok")
}
