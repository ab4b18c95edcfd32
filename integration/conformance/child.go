package conformance

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redeliver-go/redeliver/adapters/franz"
	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// envChild carries a ChildConfig to a test binary run as a consumer.
const envChild = "REDELIVER_CONFORMANCE_CHILD"

// ChildConfig describes the consumer a child process runs: one poison batch
// (the one holding offset Poison of partition 0) that always fails, every
// other batch succeeds.
type ChildConfig struct {
	Adapter        string // the adapter's name in ChildMain's map
	Member         string
	Brokers        []string
	Group, Topic   string
	SessionTimeout time.Duration
	Retries        int
	BackoffMS      int
	MaxBatch       int
	Poison         int64
	Memory         bool // in-memory retry state
	// SlowRetry, when above 0, makes the poison batch's delivery with that
	// retry number last until its context ends (or a minute), so that a
	// kill lands during it.
	SlowRetry int
	// PerRecord makes the handler per record (stream.PerRecord): the
	// record at Poison fails every time, the one before it fails once.
	PerRecord bool
	// CommitWindow is the consumer's Config.CommitWindow.
	CommitWindow time.Duration
	// Ordering is the consumer's ordering, as stream.ParseOrdering reads
	// it ("" is partition ordering).
	Ordering string
	// Cluster runs the cluster scenarios' handler and retry policy
	// instead (see clusterHandler; Poison and the others are unused),
	// dead-lettering to the topic DeadLetter through franz-go's publisher.
	Cluster    bool
	DeadLetter string
	// Lifetime is how long the child runs at most (10 minutes when 0).
	Lifetime time.Duration
}

func (c ChildConfig) poison(b *stream.Batch) bool {
	return b.Partition == 0 && b.FirstOffset() <= c.Poison && c.Poison <= b.LastOffset()
}

func (c ChildConfig) handler() stream.Handler {
	if c.PerRecord {
		var (
			mu     sync.Mutex
			before int
		)
		return stream.PerRecord(func(_ context.Context, r *stream.Record) error {
			if r.Partition != 0 {
				return nil
			}
			mu.Lock()
			defer mu.Unlock()
			switch {
			case r.Offset == c.Poison:
				return errInjected
			case r.Offset == c.Poison-1:
				if before++; before == 1 {
					return errInjected
				}
			}
			return nil
		})
	}
	return stream.HandlerFunc(func(ctx context.Context, b *stream.Batch) error {
		if c.poison(b) {
			if c.SlowRetry > 0 && b.Attempt.Retries == c.SlowRetry {
				select {
				case <-ctx.Done():
				case <-time.After(time.Minute):
				}
			}
			return errInjected
		}
		return nil
	})
}

// began is the line a child writes when it calls the handler on the poison
// batch, before the call: a delivery the kill cuts short reports nothing
// else.
type began struct {
	Began struct {
		First int64
		Retry int
	}
}

func (c ChildConfig) spec(hooks stream.Hooks) spec {
	s := spec{
		handler:  c.handler(),
		policy:   checkpoint.Policy{MaxRetries: c.Retries, Backoff: checkpoint.Fixed(time.Duration(c.BackoffMS) * time.Millisecond)},
		maxBatch: c.MaxBatch,
		hooks:    hooks,
		session:  true,
		window:   c.CommitWindow,
	}
	if c.Memory {
		s.opts = append(s.opts, stream.WithInMemoryState())
	}
	return s
}

// with returns s recording into rec (spec.rec).
func (s spec) with(rec *streamtest.History) spec {
	s.rec = rec
	return s
}

// ChildMain runs the consumer a parent test asked for, when this process is
// such a child, and then exits; otherwise it returns at once. Call it first
// in TestMain. The consumer's history events go to stdout as JSON lines; it
// stops when stdin closes, or after ten minutes.
func ChildMain(adapters map[string]Adapter) {
	raw := os.Getenv(envChild)
	if raw == "" {
		return
	}
	if err := runChild(raw, adapters); err != nil { // Run returns nil when stdin closes (a clean shutdown)
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func runChild(raw string, adapters map[string]Adapter) error {
	var cfg ChildConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	a, ok := adapters[cfg.Adapter]
	if !ok {
		return fmt.Errorf("no adapter %q", cfg.Adapter)
	}
	var (
		hist    streamtest.History
		mu      sync.Mutex
		written int
		out     = bufio.NewWriter(os.Stdout)
	)
	flush := func() {
		mu.Lock()
		defer mu.Unlock()
		evs := hist.Events()
		for _, ev := range evs[written:] {
			b, _ := json.Marshal(ev)
			out.Write(append(b, '\n'))
		}
		written = len(evs)
		out.Flush()
	}
	relay := stream.Hooks{
		Claimed:      func(stream.ClaimEvent) { flush() },
		Released:     func(stream.ReleaseEvent) { flush() },
		Delivered:    func(stream.DeliveredEvent) { flush() },
		Exhausted:    func(stream.ExhaustedEvent) { flush() },
		ActionTried:  func(stream.ActionEvent) { flush() },
		Checkpointed: func(stream.CheckpointEvent) { flush() },
		Abandoned:    func(stream.AbandonedEvent) { flush() },
	}
	s := cfg.spec(stream.MergeHooks(hist.Hooks(cfg.Member), relay))
	if cfg.Cluster {
		var faults, burst atomic.Int64
		s.handler, s.policy, s.maxBatch = clusterHandler(&faults, &burst, nil), clusterPolicy, max(cfg.MaxBatch, 1)
		cl, err := kgo.NewClient(kgo.SeedBrokers(cfg.Brokers...))
		if err != nil {
			return err
		}
		defer cl.Close()
		pub, err := franz.NewPublisher(cl)
		if err != nil {
			return err
		}
		dl, err := stream.DeadLetter(hist.Publisher(pub), cfg.DeadLetter)
		if err != nil {
			return err
		}
		s.opts = append(s.opts, stream.WithExhaustionAction(dl))
	}
	h := s.handler
	s.handler = stream.HandlerFunc(func(ctx context.Context, b *stream.Batch) error {
		if cfg.poison(b) {
			var line began
			line.Began.First, line.Began.Retry = b.FirstOffset(), b.Attempt.Retries
			raw, _ := json.Marshal(line)
			flush()
			mu.Lock()
			out.Write(append(raw, '\n'))
			out.Flush()
			mu.Unlock()
		}
		return h.Handle(ctx, b)
	})
	opts := append([]stream.Option{stream.WithPolicy(s.policy), stream.WithHooks(s.hooks)}, s.opts...)
	ordering, err := stream.ParseOrdering(cfg.Ordering)
	if err != nil {
		return err
	}
	if ordering != stream.ByPartition {
		// The start of each handler call goes out before the call, as
		// the poison batch's began line does: a call a kill cuts short
		// is known to have begun.
		flushed := func(next stream.Handler) stream.Handler {
			return stream.HandlerFunc(func(ctx context.Context, b *stream.Batch) error {
				flush()
				return next.Handle(ctx, b)
			})
		}
		s.handler = stream.Chain(s.handler, hist.Middleware(cfg.Member), flushed)
		opts = append(opts, stream.WithOrdering(ordering))
	}
	proc, err := stream.NewProcessor(s.handler, opts...)
	if err != nil {
		return err
	}
	c, err := a.NewConsumer(nil, Config{Brokers: cfg.Brokers, Group: cfg.Group, Topic: cfg.Topic, Processor: proc,
		MaxBatch: cfg.MaxBatch, SessionTimeout: cfg.SessionTimeout, HeartbeatInterval: cfg.SessionTimeout / 10, CommitWindow: cfg.CommitWindow})
	if err != nil {
		return err
	}
	lifetime := 10 * time.Minute
	if cfg.Lifetime > 0 {
		lifetime = cfg.Lifetime
	}
	ctx, cancel := context.WithTimeout(context.Background(), lifetime)
	defer cancel()
	go func() {
		io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	return c.Run(ctx)
}

// startChild runs a consumer in a child process (this test binary again),
// relays its history events into hist (and to watch's Delivered and
// Checkpointed), calls onBegan before each handler call on the poison
// batch, and returns a function that kills it with SIGKILL.
func (e *env) startChild(hist *streamtest.History, cfg ChildConfig, watch stream.Hooks, onBegan func(first int64, retry int)) (kill func() error) {
	e.t.Helper()
	kill, err := e.tryStartChild(hist, cfg, watch, onBegan)
	if err != nil {
		e.t.Fatal(err)
	}
	return kill
}

// tryStartChild is startChild returning its error, for a goroutine other
// than the test's.
func (e *env) tryStartChild(hist *streamtest.History, cfg ChildConfig, watch stream.Hooks, onBegan func(first int64, retry int)) (kill func() error, err error) {
	raw, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envChild+"="+string(raw))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start child consumer: %w", err)
	}
	relayed := make(chan struct{})
	go func() {
		defer close(relayed)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var b began
			if bytes.HasPrefix(sc.Bytes(), []byte(`{"Began"`)) {
				if json.Unmarshal(sc.Bytes(), &b) == nil && onBegan != nil {
					onBegan(b.Began.First, b.Began.Retry)
				}
				continue
			}
			var ev streamtest.Event
			if json.Unmarshal(sc.Bytes(), &ev) != nil {
				continue // a line cut short by the kill
			}
			hist.Add(ev)
			if ev.Kind == streamtest.Committed && watch.Checkpointed != nil {
				watch.Checkpointed(stream.CheckpointEvent{Topic: ev.Topic, Partition: ev.Partition, ClaimID: ev.Claim, Next: ev.Offset, Metadata: ev.Metadata})
			}
			if ev.Kind == streamtest.Delivered && watch.Delivered != nil {
				watch.Delivered(stream.DeliveredEvent{
					BatchInfo: stream.BatchInfo{Topic: ev.Topic, Partition: ev.Partition, FirstOffset: ev.First, LastOffset: ev.Last, Records: int(ev.Last - ev.First + 1)},
					Attempt:   stream.Attempt{Retries: ev.Retry}, Outcome: ev.Outcome,
				})
			}
		}
	}()
	var once sync.Once
	kill = func() error {
		var err error
		once.Do(func() {
			_ = cmd.Process.Kill()
			werr := cmd.Wait()
			<-relayed
			stdin.Close()
			var exit *exec.ExitError
			if !errors.As(werr, &exit) {
				err = fmt.Errorf("child consumer: %v\n%s", werr, stderr.String())
			}
			endKilled(hist, cfg.Member)
		})
		return err
	}
	e.t.Cleanup(func() { _ = kill() })
	return kill, nil
}

// endKilled records, for a member whose process was killed, that each
// handler call it began ([streamtest.History.Middleware]'s Started events,
// in key ordering) and did not return was cut short: a Delivered event
// with the outcome Cancelled, as for a call a revocation cuts short. The
// process is gone, and so are its calls; without it the key checker would
// take them for calls still running when the next owner delivers the
// key's records.
func endKilled(hist *streamtest.History, member string) {
	type call struct {
		tp          streamtest.TopicPartition
		first, last int64
	}
	open := map[call][]streamtest.Event{}
	for _, ev := range hist.Events() {
		if ev.Member != member {
			continue
		}
		c := call{streamtest.TopicPartition{Topic: ev.Topic, Partition: ev.Partition}, ev.First, ev.Last}
		switch ev.Kind {
		case streamtest.Started:
			open[c] = append(open[c], ev)
		case streamtest.Delivered:
			if q := open[c]; len(q) > 0 {
				open[c] = q[1:]
			}
		}
	}
	for _, q := range open {
		for _, ev := range q {
			hist.Add(streamtest.Event{Kind: streamtest.Delivered, Member: member, Claim: ev.Claim, Topic: ev.Topic, Partition: ev.Partition,
				First: ev.First, Last: ev.Last, Retry: ev.Retry, MaxRetries: ev.MaxRetries, Outcome: stream.Cancelled})
		}
	}
}
