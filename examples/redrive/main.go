// Command redrive shows the time-based re-drive of parked records on an
// embedded Kafka (kfake) and the embedded SQLite store: no server needed.
//
// A provisioning service consumes requests, sends each device a nonce and
// parks the request as NONCE_PUBLISHED while it waits for the device's
// answer (redrive.Await). Some devices answer at once, some only to the
// second nonce, some never. The scheduler re-publishes the requests that
// waited past their expiry to the retry topic, where a consumer sends the
// nonce again (NONCE_PUBLISHED_RETRY); an answer completes the entry
// (NONCE_PUBLISHED_DONE); a device that never answers is reported to the
// reply topic with an error code (NONCE_PUBLISHED_TIMEOUT).
//
// It prints the timeline and checks itself, exiting non-zero on a wrong
// result.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redeliver-go/redeliver/adapters/franz"
	"github.com/redeliver-go/redeliver/hostconfig"
	"github.com/redeliver-go/redeliver/redrive"
	"github.com/redeliver-go/redeliver/redrive/sqlitestore"
	"github.com/redeliver-go/redeliver/stream"
)

const builtinHostJSON = `{"redrive": {"interval": "00:00:00.200", "expiry": "00:00:00.500", "retryTimeout": "00:00:02",
  "maxRedrives": 3, "retryTopic": "resilience", "replyTopic": "c2d-inbound", "errorCode": "E_DEVICE_TIMEOUT"}}`

func main() {
	timeout := flag.Duration("timeout", 30*time.Second, "give up after this long")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "redrive:", err)
		os.Exit(1)
	}
}

// The devices: how each answers its nonces.
var devices = map[string]string{
	"dev-01": "prompt", "dev-02": "late", "dev-03": "never",
	"dev-04": "prompt", "dev-05": "late", "dev-06": "never",
}

func run(ctx context.Context) error {
	cfg, err := hostconfig.Load("host.json")
	if errors.Is(err, os.ErrNotExist) {
		cfg, err = hostconfig.Parse("built-in host.json", []byte(builtinHostJSON))
	}
	if err != nil {
		return err
	}
	rd := cfg.Redrive
	fmt.Print(rd.Explain(), "\n")

	// The embedded store, in a temporary directory.
	dir, err := os.MkdirTemp("", "redrive-example-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	store, err := sqlitestore.Open(ctx, filepath.Join(dir, rd.Store.Path))
	if err != nil {
		return err
	}
	defer store.Close()

	// The embedded Kafka.
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "provision-requests", rd.RetryTopic, rd.ReplyTopic))
	if err != nil {
		return err
	}
	defer cluster.Close()
	seeds := cluster.ListenAddrs()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		return err
	}
	defer cl.Close()
	pub, err := franz.NewPublisher(cl)
	if err != nil {
		return err
	}

	tl := &timeline{start: time.Now()}
	dev := &deviceSim{store: store, tl: tl}

	// The provisioning service: send the nonce, park the request until
	// the device answers.
	provision := stream.PerRecord(func(ctx context.Context, r *stream.Record) error {
		id := string(r.Key)
		if _, inserted, err := redrive.Await(ctx, store, redrive.Awaiting{Key: id, State: "NONCE_PUBLISHED", Expiry: rd.Expiry, Record: *r}); err != nil {
			return err
		} else if inserted {
			tl.add(id, "parked, NONCE_PUBLISHED: nonce 1 sent, waiting for the device")
		}
		dev.nonce(ctx, id, 1)
		return nil
	})
	// The resilience processor on the retry topic: send the nonce again.
	resend := stream.PerRecord(func(ctx context.Context, r *stream.Record) error {
		id := header(r.Headers, redrive.HeaderKey)
		n, _ := strconv.Atoi(header(r.Headers, redrive.HeaderNumber))
		dev.nonce(ctx, id, n+1)
		return nil
	})
	// The device side of the cloud: timed-out devices get an error code.
	replies := stream.PerRecord(func(ctx context.Context, r *stream.Record) error {
		id := header(r.Headers, redrive.HeaderKey)
		tl.addEffect(id, "the time-out", "reply sent to the device on "+r.Topic+": "+header(r.Headers, redrive.HeaderErrorCode))
		dev.markReplied(id)
		return nil
	})

	var wg sync.WaitGroup
	runCtx, stop := context.WithCancel(ctx)
	defer func() { stop(); wg.Wait() }()
	for _, c := range []struct {
		topic string
		h     stream.Handler
	}{{"provision-requests", provision}, {rd.RetryTopic, resend}, {rd.ReplyTopic, replies}} {
		proc, err := stream.NewProcessor(c.h, stream.WithLogger(tl.logger()))
		if err != nil {
			return err
		}
		cons, err := franz.New(proc, franz.WithKgoOptions(kgo.SeedBrokers(seeds...), kgo.ConsumerGroup("example-"+c.topic),
			kgo.ConsumeTopics(c.topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())))
		if err != nil {
			return err
		}
		wg.Go(func() { cons.Run(runCtx) })
	}

	// The scheduler publishes through the timeline, so that a re-drive is
	// shown when it is published: before the retry topic's consumer can see
	// it, and before the entry is marked.
	sch, err := redrive.NewScheduler(store, timelinePublisher{pub, tl},
		// The redrive section of host.json, as a host applies it.
		redrive.WithInterval(rd.Interval), redrive.WithRetryTimeout(rd.RetryTimeout), redrive.WithMaxRedrives(rd.MaxRedrives),
		redrive.WithRetryTopic(rd.RetryTopic), redrive.WithReplyTopic(rd.ReplyTopic), redrive.WithErrorCode(rd.ErrorCode),
		redrive.WithLogger(tl.logger()),
		redrive.WithHooks(redrive.Hooks{
			Redriven: func(e redrive.EntryEvent) {
				tl.add(e.Entry.Key, "now "+e.Entry.State())
			},
			TimedOut: func(e redrive.EntryEvent) {
				tl.add(e.Entry.Key, fmt.Sprintf("now %s (%s)", e.Entry.State(), e.Entry.LastError))
			},
		}))
	if err != nil {
		return err
	}
	wg.Go(func() { sch.Run(runCtx) })

	// The requests.
	var recs []*kgo.Record
	ids := make([]string, 0, len(devices))
	for id := range devices {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		recs = append(recs, &kgo.Record{Topic: "provision-requests", Key: []byte(id), Value: []byte(`{"device":"` + id + `"}`)})
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return err
	}

	// Wait until every entry is done or timed out and every timeout was
	// replied to.
	for {
		es, err := store.List(ctx, redrive.Filter{})
		if err == nil && len(es) == len(devices) && settled(es) && dev.replies() == count("never") {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not settled in time: %v", context.Cause(ctx))
		case <-time.After(50 * time.Millisecond):
		}
	}
	stop()
	wg.Wait()
	return check(ctx, store, rd, dev, tl)
}

func settled(es []redrive.Entry) bool {
	for _, e := range es {
		if e.Status.Pending() {
			return false
		}
	}
	return true
}

func count(kind string) int {
	n := 0
	for _, k := range devices {
		if k == kind {
			n++
		}
	}
	return n
}

// check compares the outcome with what each device does.
func check(ctx context.Context, store redrive.Store, rd *hostconfig.Redrive, dev *deviceSim, tl *timeline) error {
	var bad []string
	fmt.Println("\nresult:")
	for _, id := range sortedKeys(devices) {
		e, err := store.Get(ctx, id)
		if err != nil {
			return err
		}
		fmt.Printf("  %s  %-7s %-24s after %d re-drives\n", id, devices[id], e.State(), e.Redrives)
		var ok bool
		switch devices[id] {
		case "prompt":
			ok = e.State() == "NONCE_PUBLISHED_DONE" && e.Redrives == 0
		case "late":
			ok = e.State() == "NONCE_PUBLISHED_DONE" && e.Redrives >= 1
		case "never":
			ok = e.State() == "NONCE_PUBLISHED_TIMEOUT" && e.Redrives >= 1 && dev.gotReply(id)
		}
		if !ok {
			bad = append(bad, id)
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("wrong outcome for %v", bad)
	}
	if len(tl.early) > 0 { // the consumers have stopped: tl.early is read alone
		return fmt.Errorf("the timeline is out of order:\n  %s", strings.Join(tl.early, "\n  "))
	}
	fmt.Println("ok: prompt devices done at once, late ones done after a re-drive, silent ones timed out and told so")
	return nil
}

// deviceSim stands for the devices: each answers a nonce (or not) after a
// short delay, and the answer completes the entry.
type deviceSim struct {
	store redrive.Store
	tl    *timeline

	mu      sync.Mutex
	replied map[string]bool
}

func (d *deviceSim) nonce(ctx context.Context, id string, n int) {
	if n > 1 {
		d.tl.addEffect(id, fmt.Sprintf("re-drive #%d", n-1), fmt.Sprintf("nonce %d sent again by the retry topic's consumer", n))
	}
	kind := devices[id]
	if kind == "never" || kind == "late" && n < 2 {
		return
	}
	time.AfterFunc(50*time.Millisecond, func() {
		e, err := redrive.Complete(context.WithoutCancel(ctx), d.store, id)
		switch {
		case err == nil:
			d.tl.add(id, fmt.Sprintf("the device answered nonce %d, now %s", n, e.State()))
		case errors.Is(err, redrive.ErrNotPending):
			d.tl.add(id, fmt.Sprintf("the device answered nonce %d, too late: %s", n, e.State()))
		default:
			d.tl.add(id, "completing failed: "+err.Error())
		}
	})
}

func (d *deviceSim) markReplied(id string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.replied == nil {
		d.replied = map[string]bool{}
	}
	d.replied[id] = true
}

func (d *deviceSim) gotReply(id string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.replied[id]
}

func (d *deviceSim) replies() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.replied)
}

type timeline struct {
	start time.Time
	mu    sync.Mutex
	shown map[string]bool // the causes shown, by device and cause
	early []string        // effects shown before their cause
}

// add prints a line of the timeline as it happens, stamped under t.mu, so
// that lines come out in the order their stamps say.
func (t *timeline) add(id, what string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.print(id, what)
}

func (t *timeline) print(id, what string) {
	fmt.Printf("%6.2fs  %s  %s\n", time.Since(t.start).Seconds(), id, what)
}

// addCause prints a line that causes others (a re-drive, a time-out
// reported) and remembers that it was shown.
func (t *timeline) addCause(id, cause, what string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.shown == nil {
		t.shown = map[string]bool{}
	}
	t.shown[id+" "+cause] = true
	t.print(id, what)
}

// addEffect prints a line caused by an earlier one, and notes it when its
// cause was not shown before it: the timeline would read out of order.
func (t *timeline) addEffect(id, cause, what string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.shown[id+" "+cause] {
		t.early = append(t.early, fmt.Sprintf("%s: %q shown before its cause, %s", id, what, cause))
	}
	t.print(id, what)
}

// logger returns a logger whose warnings and errors (the scheduler's and
// the consumers': an entry timed out) are lines of the timeline, stamped
// and printed in their place among the events.
func (t *timeline) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(t, &slog.HandlerOptions{
		Level: slog.LevelWarn,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey && len(groups) == 0 {
				return slog.Attr{} // the timeline stamps the line
			}
			return a
		},
	}))
}

// Write prints a log line as a line of the timeline.
func (t *timeline) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	fmt.Printf("%6.2fs  %s\n", time.Since(t.start).Seconds(), bytes.TrimRight(p, "\n"))
	return len(p), nil
}

// timelinePublisher is the scheduler's publisher: it shows each record on
// the timeline as it publishes it, a re-drive to the retry topic or a
// time-out reported to the reply topic.
type timelinePublisher struct {
	pub stream.Publisher
	tl  *timeline
}

func (p timelinePublisher) Publish(ctx context.Context, topic string, recs []stream.Record) error {
	for _, r := range recs {
		id := header(r.Headers, redrive.HeaderKey)
		if code := header(r.Headers, redrive.HeaderErrorCode); code != "" {
			p.tl.addCause(id, "the time-out", fmt.Sprintf("timed out: reported to %s with %s", topic, code))
			continue
		}
		n := header(r.Headers, redrive.HeaderNumber)
		p.tl.addCause(id, "re-drive #"+n, fmt.Sprintf("re-driven #%s to %s", n, topic))
	}
	return p.pub.Publish(ctx, topic, recs)
}

func header(hs []stream.Header, key string) string {
	for _, h := range hs {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
