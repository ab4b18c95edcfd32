package conformance

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// Backend is a stream service other than Kafka that the suites drive in a
// Kafka broker's place: the in-memory Event Hubs of
// adapters/eventhubs/memhub, say. A [Broker] with a Backend has no
// addresses; the suite creates topics (event hubs), produces, reads
// committed positions and dead-lettered records through the Backend, and
// gives it to the adapter in [Config.Backend].
//
// What a backend does not have, the cases that need it skip, saying why:
// kfake's request control (commit failures are injected through
// [CommitFaulter] instead), a broker to restart, and state shared with a
// child process (the SIGKILL scenarios).
type Backend interface {
	// CreateTopic creates topic with the given number of partitions,
	// numbered from 0.
	CreateTopic(ctx context.Context, topic string, partitions int32) error
	// Produce appends values, in order, to a partition of topic.
	Produce(ctx context.Context, topic string, partition int32, values [][]byte) error
	// Committed returns group's committed position in each partition of
	// topic that has one: the next offset and the metadata stored with
	// it.
	Committed(ctx context.Context, group, topic string) (map[int32]Position, error)
	// Publisher returns a publisher to topic, which exists, for
	// dead-letter cases; Read returns every record topic holds.
	Publisher(topic string) (stream.Publisher, error)
	Read(ctx context.Context, topic string) ([]stream.Record, error)
}

// Position is a committed position as a [Backend] reports it.
type Position struct {
	Next     int64
	Metadata string
}

// CommitFaulter is a [Backend] that can fail checkpoint writes, for the
// commit-failure scenario: fail is called before every write and the
// write fails when it returns true. nil removes it.
type CommitFaulter interface {
	FailCommits(fail func() bool)
}

// backendCommitted is tryCommitted for a backend.
func (e *env) backendCommitted() (map[int32]kadm.Offset, error) {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	ps, err := e.backend.Committed(ctx, e.group, e.topic)
	if err != nil {
		return nil, err
	}
	m := make(map[int32]kadm.Offset, len(ps))
	for p, pos := range ps {
		m[p] = kadm.Offset{At: pos.Next, Metadata: pos.Metadata}
	}
	return m, nil
}

// deadLetterBackend is deadLetterAfterExhaustion on a backend: the batch
// whose retries are spent is published through the backend's publisher
// and read back from the dead-letter topic with its origin in headers.
func deadLetterBackend(t *testing.T, e *env) {
	const n, poison = 12, 5
	e.createTopic(1)
	dlq := e.topic + ".dlq"
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := e.backend.CreateTopic(ctx, dlq, 1); err != nil {
		t.Fatalf("create %s: %v", dlq, err)
	}
	e.produce(0, 0, n)
	pub, err := e.backend.Publisher(dlq)
	if err != nil {
		t.Fatal(err)
	}
	given := make(chan stream.BatchInfo, 1)
	h := stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
		if b.FirstOffset() <= poison && poison <= b.LastOffset() {
			return errHandler
		}
		return nil
	})
	dl, err := stream.DeadLetter(pub, dlq)
	if err != nil {
		t.Fatal(err)
	}
	e.start("a", spec{handler: h, maxBatch: 4,
		policy: checkpoint.Policy{MaxRetries: 2, Backoff: checkpoint.Fixed(short)},
		opts:   []stream.Option{stream.WithExhaustionAction(dl)},
		hooks:  stream.Hooks{Exhausted: func(ev stream.ExhaustedEvent) { given <- ev.BatchInfo }},
	})
	e.waitCommitted(map[int32]int64{0: n})
	e.hist.check(t, map[int32]int64{0: n})
	batch := <-given
	got, err := e.backend.Read(ctx, dlq)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != batch.Records {
		t.Fatalf("%s has %d records, want %d", dlq, len(got), batch.Records)
	}
	for i, r := range got {
		off := batch.FirstOffset + int64(i)
		hs := map[string]string{}
		for _, h := range r.Headers {
			hs[h.Key] = string(h.Value)
		}
		if hs[stream.HeaderTopic] != e.topic || hs[stream.HeaderPartition] != "0" || hs[stream.HeaderOffset] != strconv.FormatInt(off, 10) ||
			hs[stream.HeaderDeliveries] != "3" || hs[stream.HeaderError] != errHandler.Error() {
			t.Errorf("dead-lettered record %d: headers %v", i, hs)
		}
		if _, err := time.Parse(time.RFC3339Nano, hs[stream.HeaderFirstFailure]); err != nil {
			t.Errorf("dead-lettered record %d: first failure %q: %v", i, hs[stream.HeaderFirstFailure], err)
		}
		if want := "0:" + strconv.FormatInt(off, 10); string(r.Value) != want {
			t.Errorf("dead-lettered record %d: value %q, want %q", i, r.Value, want)
		}
	}
}

// commitFailuresBackend is commitFailuresScenario on a backend that can
// fail checkpoint writes: one write in three fails.
func commitFailuresBackend(t *testing.T, e *env, perRecord bool) Figures {
	f, ok := e.backend.(CommitFaulter)
	if !ok {
		t.Skip("the backend cannot fail checkpoint writes")
	}
	var (
		mu     sync.Mutex
		n      int64
		faults atomic.Int64
	)
	f.FailCommits(func() bool {
		mu.Lock()
		defer mu.Unlock()
		if n++; n%3 != 0 {
			return false
		}
		faults.Add(1)
		return true
	})
	defer f.FailCommits(nil)
	const parts, n0 = 3, 500
	e.fill(parts, n0)
	var hist streamtest.History
	var handlerFaults atomic.Int64
	policy := checkpoint.Policy{MaxRetries: 8, Backoff: checkpoint.FullJitter(checkpoint.Capped(10*time.Millisecond, checkpoint.Exponential(time.Millisecond)))}
	e.start("a", spec{handler: faulty(perRecord, 0, 0.2, 0.05, &handlerFaults), policy: policy, maxBatch: 10, hooks: hist.Hooks("a")})
	e.waitTotal(parts*n0, longWait)
	waitReported(t, &hist, e.ends(parts, n0), wait)
	e.stopAll()
	r := check(t, &hist, e.ends(parts, n0))
	if faults.Load() < 50 {
		t.Errorf("only %d checkpoint writes failed, want at least 50", faults.Load())
	}
	fig := figures(r, faults.Load()+handlerFaults.Load())
	fig.Note = fmt.Sprintf("failed-checkpoint-writes=%d", faults.Load())
	return fig
}
