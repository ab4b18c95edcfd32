//go:build ignore

// The sarama adapter: a consumer that runs until its context ends.
package main

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/IBM/sarama"

	rdsarama "github.com/redeliver-go/redeliver/adapters/sarama"
	"github.com/redeliver-go/redeliver/stream"
)

func main() {
	proc, err := stream.NewProcessor(stream.HandlerFunc(func(context.Context, *stream.Batch) error { return nil }))
	if err != nil {
		log.Fatal(err)
	}
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V3_9_0_0
	c, err := rdsarama.New(proc, rdsarama.WithGroup([]string{"127.0.0.1:9"}, "orders", "orders"), rdsarama.WithConfig(cfg))
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := c.Run(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("sarama: ok")
}
