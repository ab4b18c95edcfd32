//go:build ignore

// The franz-go adapter: a consumer that runs until its context ends.
package main

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/redeliver-go/redeliver/adapters/franz"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/twmb/franz-go/pkg/kgo"
)

func main() {
	proc, err := stream.NewProcessor(stream.HandlerFunc(func(context.Context, *stream.Batch) error { return nil }))
	if err != nil {
		log.Fatal(err)
	}
	c, err := franz.New(proc, franz.WithKgoOptions(
		kgo.SeedBrokers("127.0.0.1:9"), kgo.ConsumerGroup("orders"), kgo.ConsumeTopics("orders")))
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := c.Run(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("franz: ok")
}
