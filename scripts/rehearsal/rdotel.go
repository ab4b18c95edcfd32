//go:build ignore

// Telemetry: a processor whose hooks and middleware report through OpenTelemetry.
package main

import (
	"context"
	"fmt"
	"log"

	"github.com/redeliver-go/redeliver/rdotel"
	"github.com/redeliver-go/redeliver/stream"
)

func main() {
	tel, err := rdotel.New(rdotel.WithConsumerGroup("orders"))
	if err != nil {
		log.Fatal(err)
	}
	handler := stream.HandlerFunc(func(context.Context, *stream.Batch) error { return nil })
	if _, err := stream.NewProcessor(stream.Chain(handler, tel.Middleware()), stream.WithHooks(tel.Hooks())); err != nil {
		log.Fatal(err)
	}
	fmt.Println("rdotel: ok")
}
