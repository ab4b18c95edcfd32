// Command functionshost runs two functions in one redeliver host on an
// embedded Kafka (kfake): "orders" through the franz-go adapter and
// "payments" through the kafka-go adapter, each with its own retry policy
// and consumer group from one host.json. It serves the host's status page
// on a loopback port and prints its address.
//
// The payments handler cannot process one record until "the downstream is
// fixed", so its partition runs out of retries and stops (onExhausted
// stop). The program then acts as the operator: it reads the status page,
// fixes the downstream and presses Resume through the page's action, and
// checks that the stopped partition flows again and that both groups'
// checkpoints reach the end of their topics. It exits 1 when a check fails.
//
//	go run ./examples/functionshost            # checks itself and exits
//	go run ./examples/functionshost -hold 5m   # and keeps the page up for you to look at (Ctrl-C ends it)
package main

import (
	"context"
	_ "embed"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redeliver-go/redeliver/adapters/franz/franzhost"
	"github.com/redeliver-go/redeliver/adapters/kafkago/kafkagohost"
	"github.com/redeliver-go/redeliver/host"
	"github.com/redeliver-go/redeliver/hostconfig"
	"github.com/redeliver-go/redeliver/stream"
)

//go:embed host.json
var hostJSON []byte

func main() {
	config := flag.String("config", "", "a host.json to load instead of the built-in copy of examples/functionshost/host.json")
	hold := flag.Duration("hold", 0, "keep the host and its status page running this long after the checks")
	timeout := flag.Duration("timeout", 60*time.Second, "give up after this long")
	flag.Parse()
	// Ctrl-C (or SIGTERM) shuts the host down cleanly: during -hold it
	// ends the hold and the program exits 0.
	sigCtx, stopSignals := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stopSignals()
	ctx, cancel := context.WithTimeout(sigCtx, *timeout+*hold)
	defer cancel()
	if err := run(ctx, *config, *hold); err != nil {
		fmt.Fprintln(os.Stderr, "functionshost:", err)
		os.Exit(1)
	}
}

const records = 20 // per topic

func run(ctx context.Context, config string, hold time.Duration) error {
	var cfg *hostconfig.Config
	var err error
	if config != "" {
		cfg, err = hostconfig.Load(config)
	} else {
		cfg, err = hostconfig.Parse("host.json", hostJSON)
	}
	if err != nil {
		return err
	}

	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "orders"), kfake.SeedTopics(1, "payments"))
	if err != nil {
		return err
	}
	defer cluster.Close()
	brokers := cluster.ListenAddrs()
	if err := produce(ctx, brokers); err != nil {
		return err
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	page := "http://" + ln.Addr().String() + "/"
	// The Kafka clients the triggers name: each comes from a module of its
	// own, so a host whose triggers all use one client builds that client
	// only.
	franzAdapter, err := franzhost.New()
	if err != nil {
		return err
	}
	kafkagoAdapter, err := kafkagohost.New()
	if err != nil {
		return err
	}
	h, err := host.New(cfg, host.WithAdapter(franzAdapter), host.WithAdapter(kafkagoAdapter), host.WithBrokers(brokers...),
		host.WithListener(ln), host.WithRefresh(time.Second))
	if err != nil {
		return err
	}

	var ordersFailed atomic.Bool
	err = h.Register("orders", stream.HandlerFunc(func(ctx context.Context, b *stream.Batch) error {
		// A transient failure: the first delivery of the batch holding
		// offset 4 of partition 0 fails, its retry succeeds.
		if b.Partition == 0 && b.FirstOffset() <= 4 && 4 <= b.LastOffset() && ordersFailed.CompareAndSwap(false, true) {
			return errors.New("inventory service timed out")
		}
		return nil
	}))
	if err != nil {
		return err
	}
	var fixed atomic.Bool
	err = h.Register("payments", stream.PerRecord(func(ctx context.Context, r *stream.Record) error {
		if r.Offset == 7 && !fixed.Load() {
			return fmt.Errorf("payment %d: card processor rejects currency XTS", r.Offset)
		}
		return nil
	}))
	if err != nil {
		return err
	}

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	// Every wait below ends as soon as Run returns: a host that cannot
	// start (a trigger for a function the code does not register, say)
	// returns its error at once, and that error, not a timeout, is what
	// to print.
	ctx, hostStopped := context.WithCancelCause(ctx)
	defer hostStopped(nil)
	done := make(chan error, 1)
	go func() {
		err := h.Run(runCtx)
		cause := err
		if cause == nil {
			cause = errors.New("Run returned nil before the example stopped it")
		}
		hostStopped(&hostError{cause})
		done <- err
	}()
	fmt.Printf("status page: %s\n", page)

	// The operator's view: wait for the payments partition to stop.
	if err := waitFor(ctx, "payments/0 stopped", func() bool {
		p, ok := partition(h.Status(), "payments", "payments", 0)
		return ok && p.State == host.StateStopped
	}); err != nil {
		return err
	}
	p, _ := partition(h.Status(), "payments", "payments", 0)
	fmt.Printf("payments/0 stopped at offset %d after %d retries: %s\n", p.Checkpoint, p.Retry, p.LastError)
	body, err := get(page)
	if err != nil {
		return err
	}
	for _, want := range []string{"stopped after 2 retries", "Resume", "orders", "payments"} {
		if !strings.Contains(body, want) {
			return fmt.Errorf("the status page lacks %q", want)
		}
	}

	// Fix the downstream and press Resume, as the page's button does.
	fixed.Store(true)
	resp, err := http.PostForm(page+"actions/resume", url.Values{"function": {"payments"}, "topic": {"payments"}, "partition": {"0"}})
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK { // the redirect back to the page was followed
		return fmt.Errorf("resume: %s", resp.Status)
	}
	fmt.Println("resumed payments/0 through the status page")

	for _, g := range []struct {
		group, topic string
		parts        int32
		end          int64
	}{{"orders-app", "orders", 2, records / 2}, {"payments-app", "payments", 1, records}} {
		if err := waitCommitted(ctx, brokers, g.group, g.topic, g.parts, g.end); err != nil {
			return err
		}
		fmt.Printf("group %s: every partition of %s committed to its end\n", g.group, g.topic)
	}
	if !ordersFailed.Load() {
		return errors.New("the orders batch that fails once was never delivered")
	}
	if err := waitFor(ctx, "readiness", func() bool { ok, _ := h.Ready(); return ok }); err != nil {
		return err
	}
	if hold > 0 {
		fmt.Printf("holding for %v: %s\n", hold, page)
		select {
		case <-time.After(hold):
		case <-ctx.Done(): // interrupted, or the timeout: shut down as after the hold
		}
	}
	stop()
	if err := <-done; err != nil { // nil: a clean shutdown
		return fmt.Errorf("host stopped: %w", err)
	}
	fmt.Println("ok: both functions handled every record with their own policies")
	return nil
}

func produce(ctx context.Context, brokers []string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		return err
	}
	defer cl.Close()
	var recs []*kgo.Record
	for i := range records {
		recs = append(recs,
			&kgo.Record{Topic: "orders", Partition: int32(i % 2), Value: fmt.Appendf(nil, "order %d", i)},
			&kgo.Record{Topic: "payments", Partition: 0, Value: fmt.Appendf(nil, "payment %d", i)})
	}
	return cl.ProduceSync(ctx, recs...).FirstErr()
}

func partition(st host.Status, function, topic string, p int32) (host.PartitionStatus, bool) {
	for _, f := range st.Functions {
		if f.Name != function {
			continue
		}
		for _, ps := range f.Partitions {
			if ps.Topic == topic && ps.Partition == p {
				return ps, true
			}
		}
	}
	return host.PartitionStatus{}, false
}

func get(u string) (string, error) {
	resp, err := http.Get(u)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	return string(b), err
}

// hostError is the error Run returned before the example stopped it.
type hostError struct{ err error }

func (e *hostError) Error() string { return "the host stopped: " + e.err.Error() }
func (e *hostError) Unwrap() error { return e.err }

func waitFor(ctx context.Context, what string, cond func() bool) error {
	for !cond() {
		select {
		case <-ctx.Done():
			var herr *hostError
			if errors.As(context.Cause(ctx), &herr) {
				return herr
			}
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

func waitCommitted(ctx context.Context, brokers []string, group, topic string, parts int32, end int64) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	return waitFor(ctx, "group "+group+" committed to the end of "+topic, func() bool {
		offs, err := adm.FetchOffsets(ctx, group)
		if err != nil {
			return false
		}
		for p := range parts {
			o, ok := offs.Lookup(topic, p)
			if !ok || o.At != end {
				return false
			}
		}
		return true
	})
}
