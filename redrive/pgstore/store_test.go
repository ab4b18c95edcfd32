package pgstore_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/redeliver-go/redeliver/redrive"
	"github.com/redeliver-go/redeliver/redrive/pgstore"
	"github.com/redeliver-go/redeliver/redrive/redrivetest"
)

// pgURL returns the server the tests use, or skips the test.
func pgURL(t testing.TB) string {
	u := os.Getenv("REDELIVER_POSTGRES_URL")
	if u == "" {
		t.Skip("REDELIVER_POSTGRES_URL is not set: start a server with `bash integration/postgres.sh start` and export the line it prints")
	}
	return u
}

// newSchema returns a fresh schema name, dropped when the test ends.
func newSchema(t testing.TB, url string) string {
	b := make([]byte, 6)
	rand.Read(b)
	name := "rd_" + hex.EncodeToString(b)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
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

func openStore(t testing.TB, url, schema string, opts ...pgstore.Option) *pgstore.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := pgstore.Open(ctx, url, append([]pgstore.Option{pgstore.WithSchema(schema)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	url := pgURL(t)
	redrivetest.Run(t, func(t *testing.T) redrive.Store { return openStore(t, url, newSchema(t, url)) })
}

// quiet is a logger for tests whose warnings are the expected outcome.
func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }
