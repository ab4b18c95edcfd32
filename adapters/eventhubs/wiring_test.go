package eventhubs_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azeventhubs/v2"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azeventhubs/v2/checkpoints"

	"github.com/redeliver-go/redeliver/adapters/eventhubs"
	"github.com/redeliver-go/redeliver/adapters/eventhubs/memhub"
	"github.com/redeliver-go/redeliver/stream"
)

// Wiring mistakes get an error that says what is wrong, never a panic:
// each exported constructor with each nil or zero argument, nil options,
// and the zero value of each exported type.

func newProc(t *testing.T) *stream.Processor {
	t.Helper()
	proc, err := stream.NewProcessor(stream.HandlerFunc(succeed))
	if err != nil {
		t.Fatal(err)
	}
	return proc
}

// wantErr fails t unless err is an error whose text holds every part.
func wantErr(t *testing.T, what string, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: no error", what)
		return
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("%s: error %q does not say %q", what, err, p)
		}
	}
}

// sdkConsumer returns an SDK ConsumerClient for a namespace at addr, a
// loopback address; building it connects to nothing.
func sdkConsumer(t *testing.T, addr string) *azeventhubs.ConsumerClient {
	t.Helper()
	cc, err := azeventhubs.NewConsumerClientFromConnectionString(
		"Endpoint=sb://redeliver.invalid/;SharedAccessKeyName=k;SharedAccessKey=dGVzdA==;EntityPath=orders", "",
		azeventhubs.DefaultConsumerGroup, &azeventhubs.ConsumerClientOptions{
			CustomEndpoint: addr, RetryOptions: azeventhubs.RetryOptions{MaxRetries: -1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close(context.Background()) })
	return cc
}

func TestNewRefusesWiringMistakes(t *testing.T) {
	proc := newProc(t)
	keyed, err := stream.NewProcessor(stream.HandlerFunc(func(context.Context, *stream.Batch) error { return nil }), stream.WithOrdering(stream.ByKey))
	if err != nil {
		t.Fatal(err)
	}
	cc := sdkConsumer(t, "127.0.0.1:1")
	store := memhub.NewStore()
	var nilBlob *checkpoints.BlobStore
	for _, c := range []struct {
		name  string
		proc  *stream.Processor
		cc    *azeventhubs.ConsumerClient
		store azeventhubs.CheckpointStore
		opts  []eventhubs.Option
		want  []string
	}{
		{"nil processor", nil, cc, store, nil, []string{"New", "nil stream processor"}},
		{"nil client", proc, nil, store, nil, []string{"New", "nil consumer client"}},
		{"key ordering", keyed, cc, store, nil, []string{"New", "key ordering", "does not support", "stream.ByPartition"}},
		{"nil store", proc, cc, nil, nil, []string{"New", "nil checkpoint store"}},
		{"nil blob store", proc, cc, nilBlob, nil, []string{"nil checkpoint store", "*checkpoints.BlobStore"}},
		{"nil option", proc, cc, store, []eventhubs.Option{eventhubs.WithMaxBatch(5), nil}, []string{"option 2 of 2 is nil"}},
		{"zero batch", proc, cc, store, []eventhubs.Option{eventhubs.WithMaxBatch(0)}, []string{"max batch 0"}},
		{"zero wait", proc, cc, store, []eventhubs.Option{eventhubs.WithReceiveWait(0)}, []string{"receive wait"}},
		{"zero commit timeout", proc, cc, store, []eventhubs.Option{eventhubs.WithCommitTimeout(0)}, []string{"commit timeout"}},
		{"zero close timeout", proc, cc, store, []eventhubs.Option{eventhubs.WithCloseTimeout(0)}, []string{"close timeout"}},
		{"negative drain", proc, cc, store, []eventhubs.Option{eventhubs.WithDrain(-time.Second)}, []string{"WithDrain(-1s)"}},
		{"bad strategy", proc, cc, store, []eventhubs.Option{eventhubs.WithProcessorOptions(azeventhubs.ProcessorOptions{LoadBalancingStrategy: "fair"})}, []string{"fair"}},
		{"expiry within the update interval", proc, cc, store, []eventhubs.Option{eventhubs.WithProcessorOptions(azeventhubs.ProcessorOptions{UpdateInterval: 50 * time.Second})},
			[]string{"PartitionExpirationDuration 1m0s", "UpdateInterval 50s", "(1m6s)"}},
		{"expiry equal to the update interval", proc, cc, store, []eventhubs.Option{eventhubs.WithProcessorOptions(azeventhubs.ProcessorOptions{UpdateInterval: 5 * time.Second, PartitionExpirationDuration: 5 * time.Second})},
			[]string{"PartitionExpirationDuration 5s", "UpdateInterval 5s"}},
		{"negative update interval", proc, cc, store, []eventhubs.Option{eventhubs.WithProcessorOptions(azeventhubs.ProcessorOptions{UpdateInterval: -time.Second})},
			[]string{"UpdateInterval -1s"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := eventhubs.New(c.proc, c.cc, c.store, c.opts...)
			if got != nil {
				t.Errorf("New returned a consumer with error %v", err)
			}
			wantErr(t, "New", err, c.want...)
		})
	}
	// Nil options that mean "the default" are accepted.
	if _, err := eventhubs.New(proc, cc, store, eventhubs.WithLogger(nil), eventhubs.WithProcessorOptions(azeventhubs.ProcessorOptions{})); err != nil {
		t.Errorf("New with a nil logger and zero processor options: %v", err)
	}
	// The shortest expiry a 10s interval allows: 10s x1.3 + 1s, and a bit.
	if _, err := eventhubs.New(proc, cc, store, eventhubs.WithProcessorOptions(azeventhubs.ProcessorOptions{PartitionExpirationDuration: 14*time.Second + time.Millisecond})); err != nil {
		t.Errorf("New with a 14.001s expiry and the default 10s interval: %v", err)
	}
}

func TestNewWithRefusesWiringMistakes(t *testing.T) {
	proc := newProc(t)
	keyed, err := stream.NewProcessor(stream.HandlerFunc(func(context.Context, *stream.Batch) error { return nil }), stream.WithOrdering(stream.ByNone))
	if err != nil {
		t.Fatal(err)
	}
	h := newHub(t, 1, 0)
	cs, err := eventhubs.NewCheckpointStore(memhub.NewStore(), "a", nil)
	if err != nil {
		t.Fatal(err)
	}
	p, err := h.NewProcessor(cs, "cg", "a", nil)
	if err != nil {
		t.Fatal(err)
	}
	var nilProc *memhub.Processor
	for _, c := range []struct {
		name  string
		proc  *stream.Processor
		p     eventhubs.Processor
		store *eventhubs.CheckpointStore
		opts  []eventhubs.Option
		want  []string
	}{
		{"nil stream processor", nil, p, cs, nil, []string{"NewWith", "nil stream processor"}},
		{"nil processor", proc, nil, cs, nil, []string{"NewWith", "nil event hubs processor"}},
		{"nil memhub processor", proc, nilProc, cs, nil, []string{"nil event hubs processor", "*memhub.Processor"}},
		{"nil store", proc, p, nil, nil, []string{"NewWith", "nil checkpoint store"}},
		{"zero store", proc, p, &eventhubs.CheckpointStore{}, nil, []string{"zero CheckpointStore", "NewCheckpointStore"}},
		{"nil option", proc, p, cs, []eventhubs.Option{nil}, []string{"option 1 of 1 is nil"}},
		{"no ordering", keyed, p, cs, nil, []string{"NewWith", "none ordering", "does not support"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := eventhubs.NewWith(c.proc, c.p, c.store, c.opts...)
			if got != nil {
				t.Errorf("NewWith returned a consumer with error %v", err)
			}
			wantErr(t, "NewWith", err, c.want...)
		})
	}
}

func TestNewCheckpointStoreRefusesWiringMistakes(t *testing.T) {
	var nilStore *memhub.Store
	for _, c := range []struct {
		name  string
		inner azeventhubs.CheckpointStore
		owner string
		opts  *eventhubs.StoreOptions
		want  []string
	}{
		{"nil store", nil, "a", nil, []string{"nil checkpoint store to wrap"}},
		{"nil memhub store", nilStore, "a", nil, []string{"nil checkpoint store to wrap", "*memhub.Store"}},
		{"no owner", memhub.NewStore(), "", nil, []string{"empty owner ID"}},
		{"negative expiry", memhub.NewStore(), "a", &eventhubs.StoreOptions{PartitionExpirationDuration: -time.Second}, []string{"negative PartitionExpirationDuration"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := eventhubs.NewCheckpointStore(c.inner, c.owner, c.opts)
			if got != nil {
				t.Errorf("NewCheckpointStore returned a store with error %v", err)
			}
			wantErr(t, "NewCheckpointStore", err, c.want...)
		})
	}
}

func TestNewPublisherRefusesWiringMistakes(t *testing.T) {
	_, err := eventhubs.NewPublisher(nil)
	wantErr(t, "NewPublisher(nil)", err, "nil producer client")
	var nilHub *memhub.Hub
	_, err = eventhubs.NewSenderPublisher("dlq", nil)
	wantErr(t, "NewSenderPublisher with a nil sender", err, "nil sender")
	_, err = eventhubs.NewSenderPublisher("dlq", nilHub)
	wantErr(t, "NewSenderPublisher with a nil hub", err, "nil sender", "*memhub.Hub")
	dlq, _ := memhub.New("dlq", 1)
	_, err = eventhubs.NewSenderPublisher("", dlq)
	wantErr(t, "NewSenderPublisher with no hub name", err, "empty hub name")
}

func TestZeroValuesReturnErrors(t *testing.T) {
	ctx := context.Background()
	t.Run("Consumer", func(t *testing.T) {
		var zero eventhubs.Consumer
		wantErr(t, "Run on a zero Consumer", zero.Run(ctx), "zero Consumer", "eventhubs.New")
		var nilConsumer *eventhubs.Consumer
		wantErr(t, "Run on a nil Consumer", nilConsumer.Run(ctx), "zero Consumer", "eventhubs.New")
		if nilConsumer.Store() != nil || zero.Store() != nil {
			t.Error("Store of a zero Consumer is not nil")
		}
	})
	t.Run("CheckpointStore", func(t *testing.T) {
		for _, s := range []*eventhubs.CheckpointStore{{}, nil} {
			_, err := s.ClaimOwnership(ctx, []azeventhubs.Ownership{ownership("a", "0", nil)}, nil)
			wantErr(t, "ClaimOwnership", err, "zero CheckpointStore", "NewCheckpointStore")
			_, err = s.ListOwnership(ctx, ns, hubName, group, nil)
			wantErr(t, "ListOwnership", err, "zero CheckpointStore")
			_, err = s.ListCheckpoints(ctx, ns, hubName, group, nil)
			wantErr(t, "ListCheckpoints", err, "zero CheckpointStore")
			wantErr(t, "SetCheckpoint", s.SetCheckpoint(ctx, cp("0", 1), nil), "zero CheckpointStore")
			if s.OwnerID() != "" {
				t.Errorf("OwnerID of a zero store: %q", s.OwnerID())
			}
		}
		var nilStore *memhub.Store
		_, err := eventhubs.Committed(ctx, nilStore, ns, hubName, group)
		wantErr(t, "Committed on a nil store", err, "nil checkpoint store")
		_, err = eventhubs.Committed(ctx, nil, ns, hubName, group)
		wantErr(t, "Committed on no store", err, "nil checkpoint store")
	})
	t.Run("Publisher", func(t *testing.T) {
		for _, p := range []*eventhubs.Publisher{{}, nil} {
			wantErr(t, "Publish", p.Publish(ctx, "dlq", []stream.Record{{Value: []byte("x")}}), "zero Publisher", "NewPublisher")
		}
	})
	t.Run("Record", func(t *testing.T) {
		if r := eventhubs.Record("orders", 3, nil); r.Topic != "orders" || r.Partition != 3 || r.Offset != -1 {
			t.Errorf("Record of a nil event: %+v", r)
		}
	})
}

// Run returns nil after a shutdown by ctx, and the processor's error when
// the processor stops on its own: a checkpoint store that fails every
// ownership read (the in-memory processor) or a namespace that does not
// answer (the SDK's processor).
func TestRunReturnsNilOnlyForShutdown(t *testing.T) {
	t.Run("shutdown", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			h := newHub(t, 2, 5)
			m := start(t, h, memhub.NewStore(), "a", newProc(t))
			waitPositions(t, m.store, map[string]int64{"0": 5, "1": 5})
			m.stop(t)
			if m.err != nil {
				t.Fatalf("Run after ctx was cancelled: %v, want nil", m.err)
			}
		})
	})
	t.Run("store-fails", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			h := newHub(t, 1, 0)
			ms := memhub.NewStore()
			broken := errors.New("storage account unreachable")
			ms.SetFault(func(op, _ string) error {
				if op == memhub.OpListOwnership {
					return broken
				}
				return nil
			})
			cs, _ := eventhubs.NewCheckpointStore(ms, "a", nil)
			p, _ := h.NewProcessor(cs, "cg", "a", fastOpts())
			c, err := eventhubs.NewWith(newProc(t), p, cs)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if err := c.Run(ctx); !errors.Is(err, broken) {
				t.Fatalf("Run with a store that fails: %v, want the store's error", err)
			}
			wantErr(t, "Run again", c.Run(ctx), "more than once")
		})
	})
	t.Run("sdk-namespace-unreachable", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close() // nothing listens there now: connections are refused
		c, err := eventhubs.New(newProc(t), sdkConsumer(t, addr), memhub.NewStore())
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		err = c.Run(ctx)
		if err == nil || ctx.Err() != nil {
			t.Fatalf("Run on a namespace that refuses connections: %v (ctx %v), want the processor's error before the timeout", err, ctx.Err())
		}
		t.Logf("Run: %v", err)
	})
}

// Close stops a running consumer (Run returns nil and the partitions are
// handed back), and a Run after Close returns stream.ErrClosed at once.
func TestClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHub(t, 2, 5)
		cs, _ := eventhubs.NewCheckpointStore(memhub.NewStore(), "a", nil)
		p, _ := h.NewProcessor(cs, "cg", "a", fastOpts())
		c, err := eventhubs.NewWith(newProc(t), p, cs)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- c.Run(t.Context()) }()
		synctest.Wait()
		if err := c.Close(); err != nil {
			t.Fatalf("Close = %v", err)
		}
		// Run returns as Close does, give or take its last steps
		// (Close waits for the run; the goroutine then sends): a
		// moment of the bubble's clock, never a drain or a timer.
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run = %v after Close, want nil", err)
			}
		case <-time.After(time.Millisecond):
			t.Error("Close returned before Run did")
		}
	})
	synctest.Test(t, func(t *testing.T) {
		h := newHub(t, 1, 0)
		cs, _ := eventhubs.NewCheckpointStore(memhub.NewStore(), "a", nil)
		p, _ := h.NewProcessor(cs, "cg", "a", fastOpts())
		c, err := eventhubs.NewWith(newProc(t), p, cs)
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
		if err := c.Run(t.Context()); !errors.Is(err, stream.ErrClosed) {
			t.Errorf("Run after Close = %v, want stream.ErrClosed", err)
		}
	})
	var zero eventhubs.Consumer
	if err := zero.Close(); err == nil {
		t.Error("Close of a zero Consumer: no error")
	}
}

// Close called from inside the consumer, by the handler or by a hook,
// returns at once (it does not wait for Run, which waits for them), and
// Run then returns nil.
func TestCloseFromInside(t *testing.T) {
	for _, from := range []string{"handler", "hook"} {
		t.Run(from, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newHub(t, 2, 5)
				cs, _ := eventhubs.NewCheckpointStore(memhub.NewStore(), "a", nil)
				p, _ := h.NewProcessor(cs, "cg", "a", fastOpts())
				var c *eventhubs.Consumer
				closed := make(chan error, 1)
				closeIt := func() {
					select {
					case closed <- c.Close():
					default:
					}
				}
				handler := stream.HandlerFunc(succeed)
				var opts []stream.Option
				if from == "handler" {
					handler = func(context.Context, *stream.Batch) error { closeIt(); return nil }
				} else {
					opts = append(opts, stream.WithHooks(stream.Hooks{Delivered: func(stream.DeliveredEvent) { closeIt() }}))
				}
				proc, err := stream.NewProcessor(handler, opts...)
				if err != nil {
					t.Fatal(err)
				}
				if c, err = eventhubs.NewWith(proc, p, cs); err != nil {
					t.Fatal(err)
				}
				done := make(chan error, 1)
				go func() { done <- c.Run(t.Context()) }()
				select {
				case err := <-closed:
					if err != nil {
						t.Fatalf("Close from the %s = %v", from, err)
					}
				case <-time.After(time.Minute):
					t.Fatalf("Close from the %s did not return", from)
				}
				select {
				case err := <-done:
					if err != nil {
						t.Errorf("Run = %v after Close from the %s, want nil", err, from)
					}
				case <-time.After(time.Minute):
					t.Fatalf("Run did not return after Close from the %s", from)
				}
			})
		})
	}
}
