package sqlitestore_test

import (
	"context"
	"log/slog"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/redeliver-go/redeliver/redrive"
	"github.com/redeliver-go/redeliver/redrive/sqlitestore"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// BenchmarkKeyMode measures what redrive.ParkByKey costs a ByKey
// processor per record: each iteration runs a processor over a partition
// of 20,000 records of 1,000 keys (a handler that does nothing) to its
// end, and reports ns/record. plain: no ParkByKey; unlocked: ParkByKey on
// an SQLite store with no key locked (the records go through the
// in-memory set only); locked: every record's key is locked, so each is
// checked in the store and parked behind (the cost a locked key's record
// pays).
func BenchmarkKeyMode(b *testing.B) {
	const records, keys = 20000, 1000
	quiet := slog.New(slog.DiscardHandler)
	for _, mode := range []string{"plain", "unlocked", "locked"} {
		b.Run(mode, func(b *testing.B) {
			ctx := context.Background()
			s, err := sqlitestore.Open(ctx, filepath.Join(b.TempDir(), "r.db"))
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
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
