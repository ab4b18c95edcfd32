// Command kafkacluster is integration/kafka-cluster.sh's helper: it runs
// the brokers' fault proxies, waits for the cluster to be ready, cuts and
// heals a broker, and names the leader of a partition and the coordinator
// of a group.
//
//	kafkacluster proxy -api ADDR NAME=LISTEN=UPSTREAM...   run the proxies (until SIGTERM)
//	kafkacluster ready -brokers A,B,C [-n 3] [-timeout 3s] exit 0 when n brokers answer and every partition is fully in sync
//	kafkacluster leader -brokers A,B,C TOPIC PARTITION     print the leader's node id
//	kafkacluster coordinator -brokers A,B,C GROUP          print the group coordinator's node id
//	kafkacluster move -brokers A,B,C TOPIC PARTITION       move the partition's leadership to another in-sync replica
//	kafkacluster cut|heal -api ADDR NODE                   cut node off from the clients / undo it
//	kafkacluster down|up -api ADDR NODE                    close node's proxy (connections refused) / open it
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redeliver-go/redeliver/integration/kcluster"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	cmd, args := os.Args[1], os.Args[2:]
	fs := flag.NewFlagSet(cmd, flag.ExitOnError)
	brokers := fs.String("brokers", "", "comma-separated broker addresses")
	api := fs.String("api", "", "toxiproxy API address")
	n := fs.Int("n", kcluster.Nodes, "brokers expected")
	timeout := fs.Duration("timeout", 10*time.Second, "bound of the request")
	_ = fs.Parse(args)
	args = fs.Args()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	var err error
	switch cmd {
	case "proxy":
		err = runProxies(*api, args)
	case "ready":
		err = withAdmin(*brokers, *timeout, func(adm *kadm.Client) error {
			if _, err := kcluster.Coordinator(ctx, adm, "redeliver-kafka-ready"); err != nil {
				return err
			}
			return kcluster.InSync(ctx, adm, *n)
		})
	case "leader", "move":
		if len(args) != 2 {
			usage()
		}
		p, perr := strconv.ParseInt(args[1], 10, 32)
		if perr != nil {
			fail(fmt.Errorf("partition %q: %w", args[1], perr))
		}
		err = withAdmin(*brokers, *timeout, func(adm *kadm.Client) error {
			if cmd == "move" {
				from, to, err := kcluster.MoveLeader(ctx, adm, args[0], int32(p))
				if err == nil {
					fmt.Println(from, to)
				}
				return err
			}
			id, err := kcluster.Leader(ctx, adm, args[0], int32(p))
			if err == nil {
				fmt.Println(id)
			}
			return err
		})
	case "coordinator":
		if len(args) != 1 {
			usage()
		}
		err = withAdmin(*brokers, *timeout, func(adm *kadm.Client) error {
			id, err := kcluster.Coordinator(ctx, adm, args[0])
			if err == nil {
				fmt.Println(id)
			}
			return err
		})
	case "cut", "heal", "up", "down":
		if len(args) != 1 {
			usage()
		}
		node, nerr := strconv.Atoi(args[0])
		if nerr != nil {
			fail(fmt.Errorf("node %q: %w", args[0], nerr))
		}
		switch cmd {
		case "cut":
			err = kcluster.Cut(*api, node)
		case "heal":
			err = kcluster.Heal(*api, node)
		default:
			err = kcluster.SetReachable(*api, node, cmd == "up")
		}
	default:
		usage()
	}
	if err != nil {
		fail(err)
	}
}

func withAdmin(brokers string, timeout time.Duration, f func(*kadm.Client) error) error {
	if brokers == "" {
		return fmt.Errorf("-brokers is required")
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(brokers, ",")...),
		kgo.DialTimeout(timeout), kgo.RetryTimeout(timeout))
	if err != nil {
		return err
	}
	defer cl.Close()
	return f(kadm.NewClient(cl))
}

// runProxies runs one toxiproxy proxy per NAME=LISTEN=UPSTREAM and the
// toxiproxy API on api, until SIGTERM or SIGINT.
func runProxies(api string, specs []string) error {
	if api == "" || len(specs) == 0 {
		return fmt.Errorf("proxy: -api and at least one NAME=LISTEN=UPSTREAM are required")
	}
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.New(os.Stderr).Level(zerolog.WarnLevel))
	for _, s := range specs {
		parts := strings.Split(s, "=")
		if len(parts) != 3 {
			return fmt.Errorf("proxy: %q is not NAME=LISTEN=UPSTREAM", s)
		}
		p := toxiproxy.NewProxy(srv, parts[0], parts[1], parts[2])
		if err := srv.Collection.Add(p, true); err != nil {
			return fmt.Errorf("proxy %s: %w", s, err)
		}
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	errc := make(chan error, 1)
	go func() { errc <- srv.Listen(api) }()
	select {
	case err := <-errc:
		return fmt.Errorf("proxy API on %s: %w", api, err)
	case <-sig:
		_ = srv.Collection.Clear()
		return srv.Shutdown()
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: kafkacluster proxy|ready|leader|move|coordinator|cut|heal|down|up [flags] [args]")
	os.Exit(2)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "kafkacluster:", err)
	os.Exit(1)
}
