//go:build ignore

// The functions host: a function bound to a Kafka trigger from host.json.
package main

import (
	"context"
	"fmt"
	"log"

	"github.com/redeliver-go/redeliver/host"
	"github.com/redeliver-go/redeliver/hostconfig"
	"github.com/redeliver-go/redeliver/stream"
)

const hostJSON = `{
  "version": "2.0",
  "checkpointRetryPolicy": { "retryCount": 3, "sleepDuration": "00:00:01" },
  "triggers": { "orders": { "type": "kafka", "topic": "orders", "consumerGroup": "orders" } }
}`

func main() {
	cfg, err := hostconfig.Parse("host.json", []byte(hostJSON))
	if err != nil {
		log.Fatal(err)
	}
	h, err := host.New(cfg)
	if err != nil {
		log.Fatal(err)
	}
	err = h.Register("orders", stream.HandlerFunc(func(context.Context, *stream.Batch) error { return nil }))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("host: ok")
}
