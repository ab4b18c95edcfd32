package franz_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/redeliver-go/redeliver/adapters/franz/internal/engine"
	"github.com/redeliver-go/redeliver/stream"
)

// TestRevokeWritesCoalescedCommit holds the first offset commit in the
// broker while the worker asks for two success commits, revokes the
// partition meanwhile, and checks that both commits returned at once
// (coalesced), that the revocation waited for the commit in flight and
// then wrote the one not written yet, and that the claim refuses commits
// afterwards.
func TestRevokeWritesCoalescedCommit(t *testing.T) {
	kc, addrs, adm := cluster(t, 3)
	var (
		c        *engine.Consumer
		inCommit = make(chan struct{})
		release  = make(chan struct{})
		results  = make(chan error, 3)
		ready    = make(chan struct{})
		once     sync.Once
	)
	kc.ControlKey(kmsg.OffsetCommit.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		kc.DropControl() // hold the first commit only
		once.Do(func() { close(inCommit) })
		kc.SleepControl(func() { <-release })
		return nil, nil, false
	})
	c = runConsumerWith(t, addrs, func(ctx context.Context, b *stream.Batch) error {
		<-ready
		cl := engine.ClaimOf(c, "t", 0)
		results <- cl.Commit(ctx, 1, "")
		<-inCommit
		results <- cl.Commit(ctx, 2, "")
		<-ctx.Done() // the revocation
		results <- cl.Commit(ctx, 3, "")
		return ctx.Err()
	}, coalescing())
	close(ready)
	for i := range 2 {
		select {
		case err := <-results:
			if err != nil {
				t.Fatalf("commit %d: %v, want success", i+1, err)
			}
		case <-time.After(wait):
			t.Fatalf("commit %d did not return while the commit before it was in flight: not coalesced", i+1)
		}
	}
	revokeBehindCommitInFlight(t, c, release)
	if o := fetchOffset(t, adm); o.At != 2 {
		t.Errorf("broker has offset %d, want 2: the revocation did not write the coalesced commit", o.At)
	}
	if err := <-results; !errors.Is(err, stream.ErrRevoked) {
		t.Errorf("commit after the revocation: %v, want stream.ErrRevoked", err)
	}
	if o := fetchOffset(t, adm); o.At != 2 {
		t.Errorf("broker has offset %d after a refused commit, want 2", o.At)
	}
}

// TestCoalescedCommitWrittenAtTheInterval blocks the handler on the third
// batch, with more records buffered behind it, and checks that the second
// batch's success commit, held back (coalesced), is written at the commit
// interval.
func TestCoalescedCommitWrittenAtTheInterval(t *testing.T) {
	_, addrs, adm := cluster(t, 10)
	cfg := coalescing()
	cfg.MaxBatch = 1
	cfg.CommitInterval, cfg.CommitRecords = 100*time.Millisecond, 1<<30
	runConsumerWith(t, addrs, func(ctx context.Context, b *stream.Batch) error {
		if b.FirstOffset() == 2 {
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	}, cfg)
	waitUntil(t, "the second batch's commit", func() bool { o, err := offsetOf(adm); return err == nil && o.At == 2 })
}

// offsetOf returns the group's checkpoint of t/0, for a goroutine other
// than the test's.
func offsetOf(adm *kadm.Client) (kadm.OffsetResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	offs, err := adm.FetchOffsets(ctx, "g")
	if err != nil {
		return kadm.OffsetResponse{}, err
	}
	o, _ := offs.Lookup("t", 0)
	return o, nil
}

// TestCoalescingStopsAtTheWindow holds the first commit in the broker with
// a window of 3 records: the worker goes on while the records after the
// commit in flight stay within the window, and then waits for it, so that
// a crash would deliver again at most the commit in flight and one window.
func TestCoalescingStopsAtTheWindow(t *testing.T) {
	kc, addrs, adm := cluster(t, 10)
	var (
		inCommit = make(chan struct{})
		release  = make(chan struct{})
		once     sync.Once
		handled  atomic.Int32
	)
	kc.ControlKey(kmsg.OffsetCommit.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		kc.DropControl() // hold the first commit only
		once.Do(func() { close(inCommit) })
		kc.SleepControl(func() { <-release })
		return nil, nil, false
	})
	cfg := coalescing()
	cfg.MaxBatch = 1
	cfg.CommitInterval, cfg.CommitRecords = time.Hour, 3
	runConsumerWith(t, addrs, func(ctx context.Context, b *stream.Batch) error {
		if b.FirstOffset() == 1 {
			select { // the first batch's commit is in flight
			case <-inCommit:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		handled.Add(1)
		return nil
	}, cfg)
	waitUntil(t, "the batches within the window", func() bool { return handled.Load() >= 4 })
	time.Sleep(200 * time.Millisecond) // time to go past the window, if it did
	if n := handled.Load(); n > 5 {
		t.Fatalf("%d batches handled while the first commit was in flight, want at most 5 (1 in flight, 3 in the window, 1 waiting)", n)
	}
	close(release)
	waitUntil(t, "the checkpoint at the end", func() bool { o, err := offsetOf(adm); return err == nil && o.At == 10 })
}

// coalescing is the default configuration with the commit window the
// package doc recommends (franz.WithCommitWindow(500*time.Millisecond,
// 50000)): the default writes every commit before the next batch.
func coalescing() engine.Config {
	cfg := engine.DefaultConfig()
	cfg.CommitInterval, cfg.CommitRecords = engine.RecommendedCommitInterval, engine.RecommendedCommitRecords
	return cfg
}
