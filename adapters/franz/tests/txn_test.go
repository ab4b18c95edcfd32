package franz_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redeliver-go/redeliver/adapters/internal/kafkatest"
	"github.com/redeliver-go/redeliver/stream"
)

// TestTransactionalTopic writes a partition with plain records, one aborted
// and one committed transaction, and plain records again, and consumes it
// under both isolation levels: the handler never sees a transaction marker
// (a control record), and under read_committed never sees the aborted
// transaction's records.
func TestTransactionalTopic(t *testing.T) {
	for _, tc := range []struct {
		name      string
		committed bool
	}{
		{"read_committed", true},
		{"read_uncommitted", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addrs := newCluster(t, "t", 1)
			produce(t, addrs, "t", 0, 0, 3)
			kafkatest.ProduceTxn(t, addrs, "t", 0, false, kafkatest.TxnValues("aborted", 4)...)
			kafkatest.ProduceTxn(t, addrs, "t", 0, true, kafkatest.TxnValues("committed", 4)...)
			produce(t, addrs, "t", 0, 3, 3)
			want := []string{"0-0", "0-1", "0-2"}
			if !tc.committed {
				want = append(want, kafkatest.TxnValues("aborted", 4)...)
			}
			want = append(want, kafkatest.TxnValues("committed", 4)...)
			want = append(want, "0-3", "0-4", "0-5")

			var (
				mu   sync.Mutex
				got  []string
				done = make(chan struct{})
				once sync.Once
			)
			h := stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
				mu.Lock()
				defer mu.Unlock()
				for _, r := range b.Records {
					got = append(got, string(r.Value))
					if string(r.Value) == "0-5" {
						once.Do(func() { close(done) })
					}
				}
				return nil
			})
			proc, err := stream.NewProcessor(h)
			if err != nil {
				t.Fatal(err)
			}
			isolation := kgo.ReadUncommitted()
			if tc.committed {
				isolation = kgo.ReadCommitted()
			}
			start(t, addrs, "g", "t", proc, kgo.FetchIsolationLevel(isolation))
			select {
			case <-done:
			case <-time.After(wait):
				t.Fatalf("0-5 not delivered in %v", wait)
			}
			mu.Lock()
			defer mu.Unlock()
			if !slices.Equal(got, want) {
				t.Errorf("handler saw %q\nwant        %q", got, want)
			}
		})
	}
}
