//go:build ignore

// The Event Hubs adapter: a consumer over the in-memory hub.
package main

import (
	"context"
	"fmt"
	"log"

	"github.com/redeliver-go/redeliver/adapters/eventhubs"
	"github.com/redeliver-go/redeliver/stream"
)

func main() {
	proc, err := stream.NewProcessor(stream.HandlerFunc(func(context.Context, *stream.Batch) error { return nil }))
	if err != nil {
		log.Fatal(err)
	}
	if _, err := eventhubs.New(proc, nil, nil); err == nil {
		log.Fatal("eventhubs: New accepted a nil client")
	}
	fmt.Println("eventhubs: ok")
}
