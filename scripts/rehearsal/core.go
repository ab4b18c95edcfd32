//go:build ignore

// The core module: a handler that fails once, over an in-memory partition.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

func main() {
	p := streamtest.NewPartition("orders", 0, 10)
	p.AppendN(time.Now(), 20)
	failed := false
	handler := stream.HandlerFunc(func(ctx context.Context, b *stream.Batch) error {
		if !failed {
			failed = true
			return errors.New("downstream unavailable")
		}
		return nil
	})
	proc, err := stream.NewProcessor(handler,
		stream.WithPolicy(checkpoint.Policy{MaxRetries: 3, Backoff: checkpoint.Fixed(time.Millisecond)}))
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- streamtest.Run(ctx, proc, p) }()
	if err := p.WaitCommitted(ctx, p.End()); err != nil {
		log.Fatal(err)
	}
	cancel()
	if err := <-done; err != nil {
		log.Fatal(err)
	}
	next, _ := p.Committed()
	fmt.Println("core: ok, checkpoint", next)
}
