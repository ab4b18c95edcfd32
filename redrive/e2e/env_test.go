package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redeliver-go/redeliver/adapters/franz"
	"github.com/redeliver-go/redeliver/redrive"
	"github.com/redeliver-go/redeliver/redrive/pgstore"
	"github.com/redeliver-go/redeliver/stream"
)

// kafkaEnv is a Kafka to run against: kfake, or the broker named by
// REDELIVER_KAFKA_BROKERS.
type kafkaEnv struct {
	name  string
	seeds func(t testing.TB) []string
}

func kafkaEnvs() []kafkaEnv {
	envs := []kafkaEnv{{"kfake", func(t testing.TB) []string {
		c, err := kfake.NewCluster(kfake.NumBrokers(1))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c.ListenAddrs()
	}}}
	if b := os.Getenv("REDELIVER_KAFKA_BROKERS"); b != "" {
		envs = append(envs, kafkaEnv{"broker", func(testing.TB) []string { return strings.Split(b, ",") }})
	}
	return envs
}

func suffix() string {
	b := make([]byte, 4)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func ctxFor(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func client(t testing.TB, seeds []string, opts ...kgo.Opt) *kgo.Client {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(seeds...)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func createTopics(t testing.TB, seeds []string, partitions int32, topics ...string) {
	adm := kadm.NewClient(client(t, seeds))
	resp, err := adm.CreateTopics(ctxFor(t, 30*time.Second), partitions, 1, nil, topics...)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range resp {
		if r.Err != nil {
			t.Fatalf("create topic %s: %v", r.Topic, r.Err)
		}
	}
}

func publisher(t testing.TB, seeds []string) stream.Publisher {
	p, err := franz.NewPublisher(client(t, seeds))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// readAll consumes topic from the start until want records have come or
// the wait ends, and returns them.
func readAll(t testing.TB, seeds []string, topic string, want int, wait time.Duration) []*kgo.Record {
	cl := client(t, seeds, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	ctx := ctxFor(t, wait)
	var out []*kgo.Record
	for len(out) < want && ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		fs.EachRecord(func(r *kgo.Record) { out = append(out, r) })
	}
	return out
}

func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// pgURL returns the PostgreSQL server of the tests, or skips.
func pgURL(t testing.TB) string {
	u := os.Getenv("REDELIVER_POSTGRES_URL")
	if u == "" {
		t.Skip("REDELIVER_POSTGRES_URL is not set: start a server with `bash integration/postgres.sh start` and export the line it prints")
	}
	return u
}

// newSchema returns a fresh schema name, dropped when the test ends.
func newSchema(t testing.TB, url string) string {
	name := "rd_" + suffix()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Logf("dropping schema %s: %v", name, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{name}.Sanitize()+` CASCADE`); err != nil {
			t.Logf("dropping schema %s: %v", name, err)
		}
	})
	return name
}

func openPG(t testing.TB, url, schema string) *pgstore.Store {
	t.Helper()
	s, err := pgstore.Open(ctxFor(t, 60*time.Second), url, pgstore.WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// parkedEntries returns n parked entries due at due, with a long expiry.
func parkedEntries(n int, due time.Time, expiry time.Duration) []redrive.Entry {
	es := make([]redrive.Entry, n)
	for i := range es {
		es[i] = redrive.Entry{Key: fmt.Sprintf("e-%06d", i), Base: redrive.ParkedState, Status: redrive.Parked,
			StateTime: due.Add(-expiry), Created: due.Add(-expiry), Expiry: expiry, DueAt: due,
			Message: stream.Record{Topic: "orders", Partition: int32(i % 4), Offset: int64(i), Key: fmt.Appendf(nil, "k%d", i), Value: []byte("value")}}
	}
	return es
}

// countStatus counts the entries in status st.
func countStatus(t testing.TB, s redrive.Store, st redrive.Status) int {
	n := 0
	var after int64
	for {
		es, err := s.List(ctxFor(t, 60*time.Second), redrive.Filter{Status: st, AfterID: after, Limit: 5000})
		if err != nil {
			t.Fatal(err)
		}
		n += len(es)
		if len(es) < 5000 {
			return n
		}
		after = es[len(es)-1].ID
	}
}
