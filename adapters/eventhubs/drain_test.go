package eventhubs_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azeventhubs/v2"

	"github.com/redeliver-go/redeliver/adapters/eventhubs"
	"github.com/redeliver-go/redeliver/adapters/eventhubs/memhub"
	"github.com/redeliver-go/redeliver/internal/lifecycle"
	"github.com/redeliver-go/redeliver/stream"
)

// syncLog is a log buffer safe for the consumer's goroutines.
type syncLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// drainRun runs a consumer of a one-partition hub whose handler holds its
// first batch, ignoring its context, for hold (until the test ends when
// hold is 0); it cancels Run's context once the handler holds the batch
// and returns Run's error, how long Run took after the cancel, the log,
// and the partition's owner after Run returned.
func drainRun(t *testing.T, hold time.Duration, opts ...eventhubs.Option) (err error, took time.Duration, log string, owner string) {
	t.Helper()
	release := make(chan struct{})
	var once sync.Once
	releaseNow := func() { once.Do(func() { close(release) }) }
	t.Cleanup(releaseNow)
	h := newHub(t, 1, 3)
	ms := memhub.NewStore()
	entered := make(chan struct{}, 1)
	proc, perr := stream.NewProcessor(stream.HandlerFunc(func(context.Context, *stream.Batch) error {
		select {
		case entered <- struct{}{}:
		default:
		}
		<-release // ignores its context
		return nil
	}))
	if perr != nil {
		t.Fatal(perr)
	}
	var buf syncLog
	cs, _ := eventhubs.NewCheckpointStore(ms, "a", &eventhubs.StoreOptions{PartitionExpirationDuration: 2 * time.Second})
	p, _ := h.NewProcessor(cs, "cg", "a", fastOpts())
	c, cerr := eventhubs.NewWith(proc, p, cs, append([]eventhubs.Option{eventhubs.WithLogger(slog.New(slog.NewTextHandler(&buf, nil)))}, opts...)...)
	if cerr != nil {
		t.Fatal(cerr)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	<-entered
	at := time.Now()
	if hold > 0 {
		time.AfterFunc(hold, releaseNow)
	}
	cancel()
	err = <-done
	took = time.Since(at)
	os, lerr := ms.ListOwnership(context.Background(), memhub.Namespace, "orders", "cg", nil)
	if lerr != nil || len(os) != 1 {
		t.Fatalf("ownership after Run: %+v %v", os, lerr)
	}
	return err, took, buf.String(), os[0].OwnerID
}

// A handler that ignores the end of its context holds Run's stop: Run
// reports the partition it waits for, after 2s and then every 5s, and
// after the drain time logs at Error and returns an error naming it,
// leaving the handler running (the partition handed back, as on any
// stop). Run waited in silence for as long as the handler took.
func TestDrainReportsAndBoundsAHeldHandler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		err, took, log, owner := drainRun(t, 0, eventhubs.WithDrain(10*time.Second))
		if !errors.Is(err, lifecycle.ErrDrainOver) || !strings.Contains(err.Error(), "orders/0") || !strings.Contains(err.Error(), "eventhubs: drain time (10s) over") {
			t.Errorf("Run = %v, want the drain time's error naming orders/0", err)
		}
		if took != 10*time.Second {
			t.Errorf("Run returned %v after the stop, want the drain time, 10s", took)
		}
		if n := strings.Count(log, `level=WARN msg="redeliver: stopping: waiting for partitions whose handlers have not returned`); n != 2 {
			t.Errorf("%d Warn reports in 10s, want 2 (at 2s and 7s):\n%s", n, log)
		}
		if !strings.Contains(log, `level=ERROR msg="redeliver: stopping: drain time over, partitions left running" partitions=orders/0`) {
			t.Errorf("no Error line naming orders/0:\n%s", log)
		}
		if owner != "" {
			t.Errorf("the partition's owner after Run is %q, want none: handed back as on any stop", owner)
		}
	})
}

// A handler that returns within the drain time (none here: 0 waits as
// long as it takes) lets Run stop cleanly: nil, after the report, and the
// partition handed back.
func TestDrainWaitsForAHandlerThatReturns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		err, took, log, owner := drainRun(t, 40*time.Second, eventhubs.WithDrain(0))
		if err != nil {
			t.Errorf("Run = %v, want nil", err)
		}
		if took != 40*time.Second {
			t.Errorf("Run returned %v after the stop, want when the handler returned (40s)", took)
		}
		if !strings.Contains(log, `partitions=orders/0 waited=37s`) {
			t.Errorf("no report of orders/0 at 37s:\n%s", log)
		}
		if owner != "" {
			t.Errorf("the partition's owner after Run is %q, want none: not handed back", owner)
		}
	})
}

// A handler that ignores the end of its context runs on after another
// processor took its partition: the consumer reports it at Warn (after 2s,
// then every 5s), naming the partition, and at Info once it has returned.
// It said nothing while the handler ran.
func TestHandlerRunningAfterALossIsReported(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHub(t, 1, 3)
		ms := memhub.NewStore()
		entered, release := make(chan struct{}, 1), make(chan struct{})
		proc, _ := stream.NewProcessor(stream.HandlerFunc(func(context.Context, *stream.Batch) error {
			select {
			case entered <- struct{}{}:
			default:
			}
			<-release // ignores its context
			return nil
		}))
		var buf syncLog
		cs, _ := eventhubs.NewCheckpointStore(ms, "a", &eventhubs.StoreOptions{PartitionExpirationDuration: 2 * time.Second})
		p, _ := h.NewProcessor(cs, "cg", "a", fastOpts())
		c, _ := eventhubs.NewWith(proc, p, cs, eventhubs.WithLogger(slog.New(slog.NewTextHandler(&buf, nil))))
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- c.Run(ctx) }()
		<-entered
		os, err := ms.ListOwnership(context.Background(), memhub.Namespace, "orders", "cg", nil)
		if err != nil || len(os) != 1 || os[0].OwnerID != "a" {
			t.Fatalf("ownership: %+v %v", os, err)
		}
		steal := os[0]
		steal.OwnerID = "thief"
		if got, err := ms.ClaimOwnership(context.Background(), []azeventhubs.Ownership{steal}, nil); err != nil || len(got) != 1 {
			t.Fatalf("steal: %v %v", got, err)
		}
		time.Sleep(8 * time.Second)
		const report = `level=WARN msg="redeliver: a handler still runs on a partition this consumer lost to another owner`
		if n := strings.Count(buf.String(), report); n != 2 || !strings.Contains(buf.String(), "partitions=orders/0 waited=7s") {
			t.Errorf("%d reports naming orders/0 in the 8s after the loss, want 2:\n%s", n, buf.String())
		}
		close(release)
		synctest.Wait()
		if !strings.Contains(buf.String(), `msg="redeliver: the lost partition's handler has returned" partition=0 partitions=orders/0 waited=`) {
			t.Errorf("no Info line once the handler returned:\n%s", buf.String())
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v, want nil", err)
		}
		if n := strings.Count(buf.String(), report); n != 2 {
			t.Errorf("%d reports, want no more once the handler returned:\n%s", n, buf.String())
		}
	})
}
