package pgstore_test

import (
	"testing"

	"github.com/redeliver-go/redeliver/redrive"
	"github.com/redeliver-go/redeliver/redrive/redrivetest"
)

// BenchmarkKeyMode is redrivetest.BenchKeyMode on a PostgreSQL store.
func BenchmarkKeyMode(b *testing.B) {
	redrivetest.BenchKeyMode(b, func(b *testing.B) redrive.Store {
		u := pgURL(b)
		return openStore(b, u, newSchema(b, u))
	})
}
