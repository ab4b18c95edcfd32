package redrivetest

import (
	"context"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/redeliver-go/redeliver/redrive"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// BenchKeyMode measures what redrive.ParkByKey costs a ByKey processor
// per record on the store open returns (a new, empty one for each
// sub-benchmark; open closes it with b.Cleanup). Each iteration runs a
// processor over a partition of 20,000 records of 1,000 keys (a handler
// that does nothing) to its end, and reports ns/record. plain: no
// ParkByKey; unlocked: ParkByKey with no key locked (the records go
// through the in-memory set only); locked: every record's key is locked,
// so each is checked in the store and parked behind (the cost a locked
// key's record pays). A store's module calls it from a benchmark of its
// own, as sqlitestore's and pgstore's BenchmarkKeyMode do.
func BenchKeyMode(b *testing.B, open func(b *testing.B) redrive.Store) {
	if open == nil {
		b.Fatal("redrivetest.BenchKeyMode: nil open: give a function that returns a new, empty store")
	}
	const records, keys = 20000, 1000
	quiet := slog.New(slog.DiscardHandler)
	for _, mode := range []string{"plain", "unlocked", "locked"} {
		b.Run(mode, func(b *testing.B) {
			ctx := context.Background()
			s := open(b)
			n := records
			if mode == "locked" {
				n = 2000 // a store write each: fewer
			}
			var total time.Duration
			for i := 0; i < b.N; i++ {
				topic := "t" + strconv.Itoa(i)
				part := streamtest.NewPartition(topic, 0, 500)
				ks := make([]string, n)
				for j := range ks {
					ks[j] = "k" + strconv.Itoa(j%keys)
				}
				end := part.AppendKeyed(time.Now(), ks...)
				opts := []stream.Option{stream.WithOrdering(stream.ByKey), stream.WithLogger(quiet)}
				if mode != "plain" {
					if mode == "locked" {
						var locks []redrive.Entry
						for j := range keys {
							k := "k" + strconv.Itoa(j)
							locks = append(locks, redrive.Entry{Key: "lock/" + topic + "/" + k, Base: redrive.ParkedState, Status: redrive.Parked,
								StateTime: time.Now(), Created: time.Now(), Expiry: time.Hour, DueAt: time.Now().Add(time.Hour),
								Message: stream.Record{Topic: topic}, OrderKey: redrive.OrderKey(topic, 0, k)})
						}
						if _, err := s.Park(ctx, locks); err != nil {
							b.Fatal(err)
						}
					}
					park, err := redrive.ParkByKey(s, time.Hour, redrive.WithLogger(quiet))
					if err != nil {
						b.Fatal(err)
					}
					opts = append(opts, park)
				}
				proc, err := stream.NewProcessor(stream.HandlerFunc(func(context.Context, *stream.Batch) error { return nil }), opts...)
				if err != nil {
					b.Fatal(err)
				}
				rctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
				start := time.Now()
				go func() {
					if err := part.WaitCommitted(rctx, end); err != nil {
						b.Error(err)
					}
					cancel()
				}()
				_ = streamtest.Run(rctx, proc, part)
				total += time.Since(start)
				cancel()
			}
			b.ReportMetric(float64(total.Nanoseconds())/float64(b.N*n), "ns/record")
		})
	}
}
