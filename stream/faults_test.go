package stream_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// An exhaustion action whose error wraps ErrRevoked has failed like any
// other: the checkpoint does not pass its batch until a later try of the
// action succeeds (issue 10, defect 5: the worker went on to the next
// batch, whose commit passed the given-up one).
func TestExhaustionActionErrRevokedIsAFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := streamtest.NewPartition("t", 0, 5)
		p.AppendN(time.Now(), 10)
		var (
			mu        sync.Mutex
			tries     int
			succeeded bool
			bad       []int64
		)
		action := func(_ context.Context, b *stream.Batch, _ *checkpoint.ExhaustedError) error {
			mu.Lock()
			defer mu.Unlock()
			if b.FirstOffset() != 0 {
				return nil
			}
			tries++
			if tries < 3 {
				return fmt.Errorf("dead-letter producer: %w", stream.ErrRevoked)
			}
			succeeded = true
			return nil
		}
		hooks := stream.Hooks{Checkpointed: func(e stream.CheckpointEvent) {
			mu.Lock()
			defer mu.Unlock()
			if e.Next > 0 && !succeeded {
				bad = append(bad, e.Next)
			}
		}}
		h := stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
			if b.FirstOffset() == 0 {
				return errTransient
			}
			return nil
		})
		hs := start(t, h, []*streamtest.Partition{p}, stream.WithExhaustionAction(action), stream.WithHooks(hooks))
		hs.waitAll()
		hs.stop()
		if len(bad) > 0 || tries != 3 {
			t.Fatalf("checkpoints %v written before the action succeeded; %d tries of the action, want 3", bad, tries)
		}
	})
}
