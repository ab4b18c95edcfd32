package integration_test

import (
	"context"
	"testing"
	"time"

	"github.com/redeliver-go/redeliver/integration/provider"
	"github.com/redeliver-go/redeliver/redrive"
	"github.com/redeliver-go/redeliver/redrive/pgstore"
	"github.com/redeliver-go/redeliver/redrive/redrivetest"
)

// TestRedriveStore runs the re-drive store suite on pgstore against the
// testcontainers PostgreSQL provider: PostgreSQL 15 from Debian's packages,
// in a container, a new database for each case. (redrive/pgstore's own
// tests run it against the server integration/postgres.sh starts.)
func TestRedriveStore(t *testing.T) {
	redrivetest.Run(t, func(t *testing.T) redrive.Store {
		url := provider.Postgres(t)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		s, err := pgstore.Open(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	})
}
