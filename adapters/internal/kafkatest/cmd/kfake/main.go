// Command kfake runs an in-memory Kafka cluster (franz-go's kfake) in a
// process of its own, for the benchmarks: scripts/bench.sh starts it with
// KFAKE=process, so that the broker no longer shares the consumer's
// process, its heap and its garbage collector, and a leaf's CPU per record
// is the consumer's alone.
//
// It prints one line, REDELIVER_KAFKA_BROKERS=<address>, once the cluster
// listens, and runs until it is interrupted or terminated, or its standard
// input is closed (so that it ends with the script that started it).
//
//	go run ./cmd/kfake [-brokers 1] [-port 0]
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/twmb/franz-go/pkg/kfake"
)

func main() {
	brokers := flag.Int("brokers", 1, "the number of brokers")
	port := flag.Int("port", 0, "the first broker's port (0: any free port; the others follow it)")
	flag.Parse()
	if *brokers < 1 {
		log.Fatalf("kfake: -brokers %d, want at least 1", *brokers)
	}
	if *port < 0 || *port > 65535-*brokers {
		log.Fatalf("kfake: -port %d, want 0 or a port with room for %d brokers after it", *port, *brokers)
	}
	opts := []kfake.Opt{kfake.NumBrokers(*brokers)}
	if *port > 0 {
		ports := make([]int, *brokers)
		for i := range ports {
			ports[i] = *port + i
		}
		opts = append(opts, kfake.Ports(ports...))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		log.Fatalf("kfake: %v", err)
	}
	defer c.Close()
	fmt.Printf("REDELIVER_KAFKA_BROKERS=%s\n", strings.Join(c.ListenAddrs(), ","))

	done := make(chan struct{})
	go func() {
		io.Copy(io.Discard, os.Stdin)
		close(done)
	}()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	select {
	case <-sig:
	case <-done:
	}
}
